"""`tenure ls / show / break / demo` on real data in a SQLite file, and the default URL;
read-write locks held and awaited by other processes."""

from __future__ import annotations

import datetime
import json
import os
import pathlib
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

import tenure
from tests.integration.processes import worker

pytestmark = pytest.mark.sqlite

TENURE = pathlib.Path(sys.executable).parent / "tenure"


@pytest.fixture
def url(tmp_path: pathlib.Path) -> str:
    return f"sqlite:///{tmp_path / 'locks.db'}"


@pytest.fixture
def locks(url: str) -> Iterator[tenure.Locks]:
    with tenure.connect(url) as client:
        yield client


def tenure_command(*arguments: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(TENURE), *arguments], check=False, env=env, capture_output=True, text=True, timeout=120
    )


def test_ls_show_break_on_real_data(url: str, locks: tenure.Locks, env: dict[str, str]) -> None:
    taken = {}
    for name in ("orders:1", "orders:2", "stock:9"):
        lock = locks.lock(name, ttl=60)
        lock.acquire()
        taken[name] = lock.fence
    held = locks.lock("orders:1", ttl=60)  # take orders:1 again: a greater fence
    locks.break_lock("orders:1")
    assert held.acquire()
    held_fence = held.fence
    assert held_fence is not None and held_fence > (taken["orders:1"] or 0)
    free = locks.lock("orders:3", ttl=60)
    free.acquire()
    free_fence = free.fence
    free.release()

    table = tenure_command("ls", "--url", url, env=env)
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[0].split() == ["NAME", "KIND", "HOLDER", "THREAD", "SINCE", "(UTC)", "FENCE",
                                "TTL", "LEFT"]
    rows = {line.split()[0]: line.split() for line in lines[1:]}
    assert set(rows) == {"orders:1", "orders:2", "stock:9"}  # orders:3 is free
    name, kind, holder, thread, since, fence, ttl_left = rows["orders:1"]
    assert kind == "lock"
    assert holder == f"{_host()}:{os.getpid()}"
    assert thread == "MainThread"
    started = datetime.datetime.strptime(since, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.UTC)
    assert abs((datetime.datetime.now(datetime.UTC) - started).total_seconds()) < 120
    assert fence == str(held_fence)
    assert 0 < float(ttl_left.removesuffix("s")) <= 60

    prefixed = tenure_command("ls", "orders:", "--url", url, env=env)
    assert [line.split()[0] for line in prefixed.stdout.splitlines()[1:]] == [
        "orders:1", "orders:2",
    ]
    everything = tenure_command("ls", "--all", "--json", "--url", url, env=env)
    listed = {entry["name"]: entry for entry in json.loads(everything.stdout)}
    assert set(listed) == {"orders:1", "orders:2", "orders:3", "stock:9"}
    assert listed["orders:3"] == {
        "name": "orders:3", "kind": "lock", "held": False, "fence": free_fence, "limit": None,
        "value": None,
        "holder": None, "acquired_at": None, "ttl_left": None, "holders": [], "queued": 0,
        "waiters": [],
    }
    assert listed["orders:1"]["holder"] == {
        "host": _host(), "pid": os.getpid(), "thread": "MainThread",
    }
    assert listed["orders:1"]["fence"] == held_fence
    assert tenure_command("ls", "nothing:", "--url", url, env=env).stdout == (
        "no held locks or semaphores with prefix nothing:\n"
    )

    shown = tenure_command("show", "orders:1", "--url", url, env=env)
    assert shown.returncode == 0
    fields = dict(line.split(":", 1) for line in shown.stdout.splitlines())
    assert fields["state"].strip() == "held"
    assert fields["holder"].strip() == f"{_host()}:{os.getpid()}"
    assert fields["fence"].strip().startswith(str(held_fence))
    as_json = json.loads(tenure_command("show", "orders:3", "--json", "--url", url,
                                        env=env).stdout)
    assert as_json["held"] is False and as_json["fence"] == free_fence
    unknown = tenure_command("show", "never", "--json", "--url", url, env=env)
    assert (unknown.returncode, unknown.stdout) == (1, "null\n")

    broken = tenure_command("break", "orders:1", "--url", url, env=env)
    assert broken.returncode == 0
    assert f"held by {_host()}:{os.getpid()} (fence {held_fence})" in broken.stdout
    assert not held.owned()  # the holder's lease really is gone
    again = tenure_command("break", "orders:1", "--url", url, env=env)
    assert again.returncode == 1 and "not held" in again.stdout
    assert tenure_command("break", "orders:3", "--url", url, env=env).returncode == 1


def test_names_that_would_garble_a_table_are_quoted(
    url: str, locks: tenure.Locks, env: dict[str, str]
) -> None:
    locks.lock("tab\there", ttl=60).acquire()
    table = tenure_command("ls", "--url", url, env=env)
    assert "'tab\\there'" in table.stdout
    raw = json.loads(tenure_command("ls", "--json", "--url", url, env=env).stdout)
    assert raw[0]["name"] == "tab\there"


def test_the_default_url_is_the_per_user_sqlite_file_as_in_connect(
    tmp_path: pathlib.Path, env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    before = time.time_ns() // 1000  # a fence is at least the clock in us at its grant
    assert tenure_command("run", "default:job", "--", "true", env=env).returncode == 0
    assert (tmp_path / "state" / "tenure" / "locks.db").is_file()
    monkeypatch.delenv("TENURE_URL", raising=False)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    with tenure.connect() as default:
        info = default.inspect("default:job")
    assert info is not None and info.fence >= before  # the run's grant, in that file

    env["TENURE_URL"] = f"sqlite:///{tmp_path / 'elsewhere.db'}"
    assert tenure_command("run", "env:job", "--", "true", env=env).returncode == 0
    with tenure.connect(env["TENURE_URL"]) as elsewhere:
        assert elsewhere.inspect("env:job") is not None


def test_demo_oversells_without_the_lock_and_is_exact_with_it(
    url: str, env: dict[str, str], locks: tenure.Locks
) -> None:
    before = time.time_ns() // 1000
    result = tenure_command(
        "demo", "--workers", "4", "--stock", "40", "--think", "0.005", "--url", url, env=env
    )
    assert result.returncode == 0, result.stdout + result.stderr
    table = {
        match[1]: (match[2], match[3])
        for match in re.finditer(r"^  (\w[\w ]*?)\s{2,}(\S+(?: s)?)\s+(\S+(?: s)?)$",
                                 result.stdout, re.MULTILINE)
    }
    unlocked_sold, locked_sold = map(int, table["units sold"])
    assert locked_sold == 40
    assert unlocked_sold >= 40  # never fewer; more whenever two sales overlapped
    assert table["final stock"] == ("0", "0")
    assert table["oversold by"][1] == "0" and table["lost updates"][1] == "0"
    assert int(table["oversold by"][0]) == unlocked_sold - 40

    fences = re.search(
        r"fences (\d+)\.\.(\d+) over (\d+) acquisitions, all distinct", result.stdout
    )
    assert fences is not None
    first, last, count = map(int, fences.groups())
    # One acquisition per sale, plus one per worker that found the stock empty.
    assert count == 40 + 4
    assert before <= first < last  # a fresh file: the demo's own grants
    assert "each write's fence above the last: yes" in result.stdout
    assert "exactly 40" in result.stdout
    info = locks.inspect("demo:stock")
    assert info is not None and info.fence == last and not info.held


def test_demo_against_an_unreachable_server_names_it_before_any_worker(
    env: dict[str, str],
) -> None:
    # A port nothing listens on: connecting sends nothing, so the demo's own first call
    # must be what fails. Before, every worker failed alone and the demo said "NOT exact
    # (0 sold of 100)" with exit 1.
    from tests.servers._process import free_port

    port = free_port()
    result = tenure_command("demo", "--url", f"redis://127.0.0.1:{port}/0", env=env)
    assert result.returncode == 69, result.stdout + result.stderr  # EX_UNAVAILABLE
    assert f"redis://127.0.0.1:{port}/0" in result.stderr
    assert "Connection refused" in result.stderr
    assert "tenure demo:" not in result.stdout  # no phase began


def _host() -> str:
    import socket

    return socket.gethostname()


def test_ls_show_break_show_semaphore_permits(
    url: str, locks: tenure.Locks, env: dict[str, str]
) -> None:
    permits = [locks.semaphore("exports", limit=3, ttl=60) for _ in range(2)]
    for permit in permits:
        assert permit.acquire()
    fences = sorted(str(permit.fence) for permit in permits)
    table = tenure_command("ls", "--url", url, env=env)
    assert table.returncode == 0, table.stderr
    rows = [line.split() for line in table.stdout.splitlines()[1:]]
    assert [row[:3] for row in rows] == [
        ["exports", "sem", "2/3"], ["exports", "sem", "2/3"],
    ]
    assert sorted(row[6] for row in rows) == fences
    assert {row[3] for row in rows} == {f"{_host()}:{os.getpid()}"}

    shown = tenure_command("show", "exports", "--url", url, env=env)
    assert shown.returncode == 0, shown.stderr
    assert "kind:     semaphore" in shown.stdout
    assert "2 of 3 permits held" in shown.stdout
    assert shown.stdout.count("permit ") == 2
    as_json = json.loads(tenure_command("show", "exports", "--json", "--url", url,
                                        env=env).stdout)
    assert as_json["kind"] == "semaphore" and as_json["limit"] == 3
    assert sorted(str(h["fence"]) for h in as_json["holders"]) == fences

    # A lock of the same name is shown beside the semaphore.
    assert locks.lock("exports", ttl=60).acquire()
    both = json.loads(tenure_command("show", "exports", "--json", "--url", url, env=env).stdout)
    assert [entry["kind"] for entry in both] == ["lock", "semaphore"]

    broken = tenure_command("break", "exports", "--semaphore", "--url", url, env=env)
    assert broken.returncode == 0 and "every permit is gone" in broken.stdout
    assert not any(permit.owned() for permit in permits)
    again = tenure_command("break", "exports", "--semaphore", "--url", url, env=env)
    assert again.returncode == 1


def test_ls_show_break_a_read_write_lock_held_and_awaited_by_other_processes(
    url: str, locks: tenure.Locks, env: dict[str, str], tmp_path: pathlib.Path
) -> None:
    name = "reports"
    readers = worker("hold-reads", url, name, "2", "60")
    start = tmp_path / "start"
    writer = worker("queued", url, name, "write", "1", "60", str(start),
                    str(tmp_path / "writer.txt"))
    try:
        assert readers.stdout is not None and writer.stdout is not None
        line = readers.stdout.readline()
        assert line.startswith("acquired"), line + (readers.stderr.read() if readers.stderr
                                                    else "")
        fences = [int(fence) for fence in line.split()[1:]]
        assert writer.stdout.readline().strip() == "ready"
        start.touch()
        deadline = time.monotonic() + 30  # a bound on a hang, not a timing assertion
        while (info := locks.inspect(name, kind="rwlock")) is None or info.queued < 1:
            assert time.monotonic() < deadline, "the writer never queued"
            time.sleep(0.01)

        table = tenure_command("ls", "--url", url, env=env)
        assert table.returncode == 0, table.stderr
        rows = [line.split() for line in table.stdout.splitlines()[1:]]
        assert [row[:5] for row in rows] == [[name, "rwlock", "read", "+1", "queued"]] * 2
        assert {row[5] for row in rows} == {f"{_host()}:{readers.pid}"}
        shown = json.loads(tenure_command("show", name, "--json", "--url", url, env=env).stdout)
        assert shown["kind"] == "rwlock" and shown["queued"] == 1 and shown["held"] is True
        assert [holder["mode"] for holder in shown["holders"]] == ["read", "read"]
        assert [holder["pid"] for holder in shown["holders"]] == [readers.pid] * 2
        assert sorted(holder["fence"] for holder in shown["holders"]) == sorted(fences)
        assert shown["fence"] == max(fences)
        # The waiter, another process, listed with who it is and what it waits for.
        (waiter,) = shown["waiters"]
        assert (waiter["host"], waiter["pid"], waiter["mode"]) == (_host(), writer.pid, "write")
        assert waiter["since"].endswith("+00:00")
        printed = tenure_command("show", name, "--url", url, env=env).stdout
        assert f"waiter 1: {_host()}:{writer.pid} thread " in " ".join(printed.split())

        broken = tenure_command("break", name, "--rwlock", "--url", url, env=env)
        assert broken.returncode == 0 and "broke read-write lock" in broken.stdout, (
            broken.stdout + broken.stderr
        )
        # The break rang the queued writer in its own process: it holds the lock now, with
        # the next fence of the name.
        deadline = time.monotonic() + 30
        while not (info := locks.inspect(name, kind="rwlock")) or not info.held:
            assert time.monotonic() < deadline, "the writer was never granted"
            time.sleep(0.01)
        after = json.loads(tenure_command("show", name, "--json", "--url", url, env=env).stdout)
        assert [(h["mode"], h["pid"]) for h in after["holders"]] == [("write", writer.pid)]
        assert after["queued"] == 0 and after["fence"] > max(fences)
        again = tenure_command("break", name, "--rwlock", "--url", url, env=env)
        assert again.returncode == 0  # the writer's lease was live
        assert tenure_command("break", name, "--rwlock", "--url", url,
                              env=env).returncode == 1
    finally:
        for process in (readers, writer):
            if process.poll() is None:
                process.send_signal(signal.SIGKILL)
            process.communicate()
