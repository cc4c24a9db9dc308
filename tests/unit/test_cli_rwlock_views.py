"""``tenure ls`` / ``show`` / ``break`` on read-write and fair locks, run in-process against a
``memory://`` store this test fills (memory is per process, so a subprocess would see an empty
store; the subprocess runs of these commands come with the first cross-process backend that
offers read-write locks, SQLite)."""

from __future__ import annotations

import datetime
import json
import os
import threading
import time

import pytest

import tenure
from tenure._tokens import HOST
from tenure.cli.main import main

URL = "memory://cli-rwlock-views"


@pytest.fixture
def locks() -> tenure.Locks:
    return tenure.connect(URL)


def run(capsys: pytest.CaptureFixture[str], *arguments: str) -> tuple[int, str]:
    status = main([*arguments, "--url", URL])
    return status, capsys.readouterr().out


def flat(text: str) -> str:
    """``show``'s fields with their alignment squeezed to one space."""
    return " ".join(text.split())


def until_queued(locks: tenure.Locks, name: str, count: int) -> None:
    deadline = time.monotonic() + 10
    while (info := locks.inspect(name, kind="rwlock")) is None or info.queued < count:
        assert time.monotonic() < deadline
        time.sleep(0.01)


def test_ls_and_show_readers_and_the_queue(
    locks: tenure.Locks, capsys: pytest.CaptureFixture[str]
) -> None:
    rw = locks.rwlock("catalog", ttl=60)
    readers = [rw.read(), rw.read()]
    for reader in readers:
        assert reader.acquire()
    writer = rw.write()
    waiting = threading.Thread(target=writer.acquire, kwargs={"timeout": 30})
    waiting.start()
    try:
        until_queued(locks, "catalog", 1)
        status, table = run(capsys, "ls", "catalog")
        assert status == 0
        rows = [line.split() for line in table.splitlines()[1:]]
        assert [row[:5] for row in rows] == [["catalog", "rwlock", "read", "+1", "queued"]] * 2
        assert sorted(int(row[-2]) for row in rows) == sorted(r.fence or 0 for r in readers)

        status, shown = run(capsys, "show", "catalog")
        assert status == 0
        assert "kind: rwlock" in flat(shown)
        assert "state: held by 2 readers" in flat(shown)
        assert "queued: 1 waiting" in flat(shown)
        assert "reader 1:" in shown and "reader 2:" in shown and "writer:" not in shown

        status, as_json = run(capsys, "show", "catalog", "--json")
        entry = json.loads(as_json)
        assert entry["kind"] == "rwlock" and entry["queued"] == 1 and entry["held"]
        assert [h["mode"] for h in entry["holders"]] == ["read", "read"]
    finally:
        for reader in readers:
            reader.release()
        waiting.join()
    status, shown = run(capsys, "show", "catalog")
    assert "state: held by a writer" in flat(shown) and "writer:" in shown
    assert "queued: 0 waiting" in flat(shown)
    writer.release()


def test_a_fair_lock_shows_as_a_fair_lock_and_breaks(
    locks: tenure.Locks, capsys: pytest.CaptureFixture[str]
) -> None:
    fair = locks.lock("deploy", ttl=60, fair=True)
    assert fair.acquire()
    plain = locks.lock("deploy", ttl=60)
    assert plain.acquire()
    waiters = [locks.lock("deploy", ttl=60, fair=True) for _ in range(3)]
    threads = [threading.Thread(target=w.acquire, kwargs={"timeout": 30}) for w in waiters]
    for thread in threads:
        thread.start()
    until_queued(locks, "deploy", 3)
    status, as_json = run(capsys, "show", "deploy", "--json")
    both = json.loads(as_json)
    assert [entry["kind"] for entry in both] == ["lock", "fair"]
    assert both[1]["queued"] == 3 and both[1]["holders"][0]["mode"] == "write"
    status, shown = run(capsys, "show", "deploy")
    assert "kind: fair" in flat(shown) and "state: held" in flat(shown)
    assert "holder:" in shown and "writer" not in shown and "rwlock" not in shown
    status, table = run(capsys, "ls", "deploy")
    kinds = sorted(" ".join(line.split()[1:4]) for line in table.splitlines()[1:])
    assert kinds[0] == "fair +3 queued" and kinds[1].startswith("lock")

    status, said = run(capsys, "break", "deploy", "--fair")
    assert status == 0 and "broke fair lock deploy" in said
    assert fair.owned() is False and plain.owned() is True  # only the queue's record broke
    for _ in waiters:  # the waiters go on in turn
        deadline = time.monotonic() + 10
        while not (holding := [w for w in waiters if w.owned()]):
            assert time.monotonic() < deadline
            time.sleep(0.01)
        holding[0].release()
    for thread in threads:
        thread.join()
    status, said = run(capsys, "break", "deploy", "--fair")
    assert status == 1 and "fair lock deploy was not held" in said
    status, said = run(capsys, "ls", "deploy", "--all")
    assert "rwlock" in said and "(free)" in said  # a free name does not say which made it
    plain.release()
    with pytest.raises(tenure.LockLost):
        fair.release()


def test_show_lists_the_waiters_in_arrival_order(
    locks: tenure.Locks, capsys: pytest.CaptureFixture[str]
) -> None:
    holder = locks.lock("ledger", ttl=60, fair=True)
    assert holder.acquire()
    waiting = [
        (locks.rwlock("ledger", ttl=60).read(), "reader-thread"),
        (locks.lock("ledger", ttl=60, fair=True), "writer-thread"),
    ]
    threads = []
    for number, (lock, thread_name) in enumerate(waiting, start=1):
        thread = threading.Thread(target=lock.acquire, kwargs={"timeout": 30}, name=thread_name)
        thread.start()
        threads.append(thread)
        until_queued(locks, "ledger", number)  # one by one: a known arrival order
    try:
        status, as_json = run(capsys, "show", "ledger", "--json")
        assert status == 0
        entry = json.loads(as_json)
        assert entry["queued"] == 2
        assert [(w["thread"], w["mode"]) for w in entry["waiters"]] == [
            ("reader-thread", "read"), ("writer-thread", "write"),
        ]
        for waiter in entry["waiters"]:
            assert waiter["host"] == HOST and waiter["pid"] == os.getpid()
            assert datetime.datetime.fromisoformat(waiter["since"]).tzinfo is not None

        status, shown = run(capsys, "show", "ledger")
        lines = flat(shown)
        assert "queued: 2 waiting" in lines
        first = lines.index("waiter 1:")
        second = lines.index("waiter 2:")
        assert first < second
        assert "thread reader-thread, to read, since" in lines[first:second]
        assert "thread writer-thread, to write, since" in lines[second:]
    finally:
        holder.release()
        threads[0].join()
        waiting[0][0].release()
        threads[1].join()
        waiting[1][0].release()
    status, as_json = run(capsys, "show", "ledger", "--json")
    assert json.loads(as_json)["waiters"] == []


def test_a_read_write_lock_among_fair_locks_shows_as_a_read_write_lock(
    locks: tenure.Locks, capsys: pytest.CaptureFixture[str]
) -> None:
    fair = locks.lock("mixed", ttl=60, fair=True)
    assert fair.acquire()
    writer = locks.rwlock("mixed", ttl=60).write()
    waiting = threading.Thread(target=writer.acquire, kwargs={"timeout": 30})
    waiting.start()
    try:
        until_queued(locks, "mixed", 1)
        status, as_json = run(capsys, "show", "mixed", "--json")
        assert json.loads(as_json)["kind"] == "rwlock"
        status, shown = run(capsys, "show", "mixed")
        assert "kind: rwlock" in flat(shown) and "writer (a fair lock):" in shown
        status, said = run(capsys, "break", "mixed", "--rwlock")
        assert status == 0 and "broke read-write lock mixed" in said
    finally:
        waiting.join()
    status, as_json = run(capsys, "show", "mixed", "--json")
    assert json.loads(as_json)["kind"] == "rwlock"  # the read-write lock's writer holds it
    writer.release()
