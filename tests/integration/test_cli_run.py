"""`tenure run` against a real SQLite file, each tenure a real process: mutual exclusion, the
busy status, a lost lease terminating the command, signal forwarding, release on exit."""

from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

import tenure

pytestmark = pytest.mark.sqlite

TENURE = pathlib.Path(sys.executable).parent / "tenure"

# A command that says it started, then runs until the file `go` appears. On SIGINT/SIGTERM it
# writes the signal's name to `got` and exits 5. It records its TENURE_FENCE in `fence`.
PATIENT = """
import os, pathlib, signal, sys, time
here = pathlib.Path(sys.argv[1])
def stop(signum, frame):
    (here / "got").write_text(signal.Signals(signum).name)
    sys.exit(5)
for signum in (signal.SIGINT, signal.SIGTERM):
    signal.signal(signum, stop)
(here / "fence").write_text(os.environ["TENURE_FENCE"])
(here / "ready").touch()
while not (here / "go").exists():
    time.sleep(0.02)
"""

# Like PATIENT, but ignores SIGTERM (only SIGKILL ends it).
STUBBORN = """
import pathlib, signal, sys, time
here = pathlib.Path(sys.argv[1])
signal.signal(signal.SIGTERM, lambda signum, frame: (here / "got").write_text("SIGTERM"))
(here / "ready").touch()
while True:
    time.sleep(0.02)
"""


WITHOUT_SIGTIMEDWAIT = pathlib.Path(__file__).parent.parent / "without_sigtimedwait"
"""A sitecustomize that deletes ``signal.sigtimedwait``, as macOS's Python lacks it."""


@pytest.fixture(params=["sigtimedwait", "without-sigtimedwait"])
def env(tmp_path: pathlib.Path, request: pytest.FixtureRequest) -> dict[str, str]:
    """Every test runs twice: with ``signal.sigtimedwait`` (Linux) and without (as on macOS),
    for every ``tenure`` the test starts."""
    environment = {k: v for k, v in os.environ.items() if k != "TENURE_DEBUG"}
    environment["TENURE_URL"] = f"sqlite:///{tmp_path / 'locks.db'}"
    environment["XDG_STATE_HOME"] = str(tmp_path / "state")
    if request.param == "without-sigtimedwait":
        environment["PYTHONPATH"] = os.pathsep.join(
            filter(None, [str(WITHOUT_SIGTIMEDWAIT), environment.get("PYTHONPATH")])
        )
    return environment


def test_the_macos_stand_in_really_lacks_sigtimedwait(env: dict[str, str]) -> None:
    probe = subprocess.run(
        [sys.executable, "-c", "import signal; print(hasattr(signal, 'sigtimedwait'))"],
        env=env, capture_output=True, text=True, check=True, timeout=60,
    )
    # (Only this way round: with the whole run under the switch, both variants lack it.)
    if str(WITHOUT_SIGTIMEDWAIT) in env.get("PYTHONPATH", ""):
        assert probe.stdout.strip() == "False"


@pytest.fixture
def spawned() -> Iterator[list[subprocess.Popen[str]]]:
    """Processes a test starts; any still running at the end are killed (by their pid), and
    every one is reaped with its pipes closed (a failed test's open pipes otherwise surfaced
    as ResourceWarnings in the next test of the worker, failing it: ci3)."""
    processes: list[subprocess.Popen[str]] = []
    yield processes
    for process in processes:
        if process.poll() is None:
            process.kill()
        process.communicate()


def tenure_command(*arguments: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(TENURE), *arguments], check=False, env=env, capture_output=True, text=True, timeout=60
    )


def start(
    spawned: list[subprocess.Popen[str]], *arguments: str, env: dict[str, str]
) -> subprocess.Popen[str]:
    process = subprocess.Popen(
        [str(TENURE), *arguments], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True,
    )
    spawned.append(process)
    return process


def wait_for(path: pathlib.Path, process: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 30
    while not path.exists():
        if process.poll() is not None:
            pytest.fail(f"tenure exited {process.returncode} early: {process.communicate()}")
        if time.monotonic() > deadline:
            pytest.fail(f"{path} never appeared")
        time.sleep(0.02)


def finish(process: subprocess.Popen[str]) -> tuple[int, str, str]:
    stdout, stderr = process.communicate(timeout=60)
    return process.returncode, stdout, stderr


def hold(
    spawned: list[subprocess.Popen[str]], here: pathlib.Path, env: dict[str, str],
    *options: str, script: str = PATIENT, name: str = "job",
) -> subprocess.Popen[str]:
    """A `tenure run` holding ``name`` while a Python command waits in ``here``."""
    here.mkdir(exist_ok=True)
    process = start(spawned, "run", name, *options, "--", sys.executable, "-c", script,
                    str(here), env=env)
    wait_for(here / "ready", process)
    return process


def test_a_second_run_is_excluded_while_the_first_holds(
    tmp_path: pathlib.Path, env: dict[str, str], spawned: list[subprocess.Popen[str]]
) -> None:
    holder = hold(spawned, tmp_path / "first", env)
    marker = tmp_path / "second-ran"

    refused = tenure_command("run", "job", "--no-wait", "--", "touch", str(marker), env=env)
    assert refused.returncode == 75
    assert not marker.exists()
    assert f":{holder.pid}" in refused.stderr and "not running 'touch'" in refused.stderr

    timed_out = tenure_command("run", "job", "--timeout", "0.3", "--", "touch", str(marker),
                               env=env)
    assert timed_out.returncode == 75 and "not acquired within 0.3 s" in timed_out.stderr
    custom = tenure_command("run", "job", "--no-wait", "--busy-exit-code", "9", "--",
                            "touch", str(marker), env=env)
    assert custom.returncode == 9
    assert not marker.exists()

    # Another name is independent.
    assert tenure_command("run", "other", "--no-wait", "--", "true", env=env).returncode == 0

    (tmp_path / "first" / "go").touch()
    assert finish(holder) == (0, "", "")
    assert tenure_command("run", "job", "--no-wait", "--", "touch", str(marker),
                          env=env).returncode == 0
    assert marker.exists()


def test_a_waiting_run_goes_next_with_a_greater_fence(
    tmp_path: pathlib.Path, env: dict[str, str], spawned: list[subprocess.Popen[str]]
) -> None:
    first = hold(spawned, tmp_path / "first", env)
    (tmp_path / "second").mkdir()
    second = start(spawned, "run", "job", "--timeout", "50", "--", sys.executable, "-c", PATIENT,
                   str(tmp_path / "second"), env=env)
    (tmp_path / "second" / "go").touch()  # the second command ends as soon as it runs
    assert not (tmp_path / "second" / "ready").exists()
    (tmp_path / "first" / "go").touch()
    assert finish(first)[0] == 0
    assert finish(second)[0] == 0
    first_fence = int((tmp_path / "first" / "fence").read_text())
    second_fence = int((tmp_path / "second" / "fence").read_text())
    assert second_fence > first_fence


def test_the_lock_is_released_when_the_command_fails(
    tmp_path: pathlib.Path, env: dict[str, str]
) -> None:
    before = time.time_ns() // 1000  # a fence is at least the clock in us at its grant
    assert tenure_command("run", "job", "--", "sh", "-c", "exit 3", env=env).returncode == 3
    with tenure.connect(env["TENURE_URL"]) as locks:
        info = locks.inspect("job")
    assert info is not None and not info.held and info.fence >= before


def test_a_lost_lease_terminates_the_command_with_sigterm(
    tmp_path: pathlib.Path, env: dict[str, str], spawned: list[subprocess.Popen[str]]
) -> None:
    # ttl 0.6 s: the watchdog renews every 0.2 s, so the break is noticed quickly.
    holder = hold(spawned, tmp_path / "first", env, "--ttl", "0.6")
    broken = tenure_command("break", "job", env=env)
    assert broken.returncode == 0 and f":{holder.pid}" in broken.stdout

    status, _, stderr = finish(holder)
    assert status == 76  # the command itself exited 5 after SIGTERM: the lost status wins
    assert (tmp_path / "first" / "got").read_text() == "SIGTERM"
    assert "lost the lease on 'job'" in stderr and "renewal refused" in stderr
    # The CLI owns stderr: every line is its own, and the loss is told once, not also by
    # the library's WARNING through Python's last-resort handler.
    lines = stderr.splitlines()
    assert all(line.startswith("tenure: ") for line in lines), stderr
    assert sum("renewal refused" in line for line in lines) == 1, stderr


def test_a_command_ignoring_sigterm_gets_sigkill_after_the_grace(
    tmp_path: pathlib.Path, env: dict[str, str], spawned: list[subprocess.Popen[str]]
) -> None:
    holder = hold(spawned, tmp_path / "first", env, "--ttl", "0.6", "--grace", "0.5",
                  "--lost-exit-code", "42", script=STUBBORN)
    assert tenure_command("break", "job", env=env).returncode == 0
    status, _, stderr = finish(holder)
    assert status == 42
    assert (tmp_path / "first" / "got").read_text() == "SIGTERM"
    assert "SIGKILL" in stderr


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_signals_are_forwarded_and_the_lock_released(
    signum: signal.Signals,
    tmp_path: pathlib.Path,
    env: dict[str, str],
    spawned: list[subprocess.Popen[str]],
) -> None:
    holder = hold(spawned, tmp_path / "first", env)
    holder.send_signal(signum)
    status, _, _ = finish(holder)
    assert status == 5  # the command's own status: it handled the signal and exited 5
    assert (tmp_path / "first" / "got").read_text() == signum.name
    assert tenure_command("run", "job", "--no-wait", "--", "true", env=env).returncode == 0


def test_a_signal_while_waiting_runs_nothing(
    tmp_path: pathlib.Path, env: dict[str, str], spawned: list[subprocess.Popen[str]]
) -> None:
    holder = hold(spawned, tmp_path / "first", env)
    marker = tmp_path / "waiter-ran"
    waiter = start(spawned, "run", "job", "--", "touch", str(marker), env=env)
    wait_until_blocking(waiter, signal.SIGTERM)
    time.sleep(0.3)  # into its wait for the lock (the outcome is the same if not yet)
    waiter.send_signal(signal.SIGTERM)
    status, _, stderr = finish(waiter)
    assert status == 128 + signal.SIGTERM
    assert "SIGTERM while waiting for 'job'; nothing was run" in stderr
    (tmp_path / "first" / "go").touch()
    assert finish(holder)[0] == 0
    assert not marker.exists()


def wait_until_blocking(process: subprocess.Popen[str], signum: int) -> None:
    """Until ``process`` has ``signum`` blocked or caught (tenure run takes its signals first
    thing: blocked where sigtimedwait exists, else caught), so that a signal sent now is
    tenure's to handle, not the interpreter's default action."""
    bit = 1 << (signum - 1)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        status = pathlib.Path(f"/proc/{process.pid}/status").read_text()
        taken = 0
        for field in ("SigBlk:", "SigCgt:"):
            taken |= int(status.split(field)[1].split()[0], 16)
        if taken & bit:
            return
        time.sleep(0.01)
    pytest.fail("tenure never took its signals")


# Counts the SIGINTs it gets; a second later writes the count to `count` and exits 5.
COUNTING = """
import pathlib, signal, sys, time
here = pathlib.Path(sys.argv[1])
count = 0
def on_interrupt(signum, frame):
    global count
    count += 1
signal.signal(signal.SIGINT, on_interrupt)
(here / "ready").touch()
while not count:
    time.sleep(0.01)
time.sleep(1.0)
(here / "count").write_text(str(count))
sys.exit(5)
"""

# Runs argv[1:] in a new session whose controlling terminal is stdin (a pty).
WITH_TERMINAL = """
import fcntl, os, sys, termios
os.setsid()
fcntl.ioctl(0, termios.TIOCSCTTY, 0)
os.execv(sys.argv[1], sys.argv[1:])
"""


def test_ctrl_c_on_the_terminal_reaches_the_command(
    tmp_path: pathlib.Path, env: dict[str, str], spawned: list[subprocess.Popen[str]]
) -> None:
    """The terminal's SIGINT hits tenure and CMD together: CMD handles it, tenure neither dies
    of it nor gives up, and exits with CMD's status. (Whether tenure sends a second copy can't
    be seen here: two SIGINTs close together coalesce. should_forward is tested for that.)"""
    import pty

    here = tmp_path / "first"
    here.mkdir()
    controller, terminal = pty.openpty()
    try:
        process = subprocess.Popen(
            [sys.executable, "-c", WITH_TERMINAL, str(TENURE), "run", "job", "--",
             sys.executable, "-c", COUNTING, str(here)],
            stdin=terminal, stdout=terminal, stderr=terminal, env=env, text=True,
        )
        spawned.append(process)
        os.close(terminal)
        wait_for(here / "ready", process)
        os.write(controller, b"\x03")  # the terminal sends SIGINT to its foreground group
        assert process.wait(timeout=60) == 5
    finally:
        os.close(controller)
    assert (here / "count").read_text() == "1"


# Records its start and end (wall clock, one host) in a file of its own, then stays a while.
OVERLAPPING = """
import pathlib, sys, time
out = pathlib.Path(sys.argv[1])
start = time.time()
time.sleep(0.3)
out.write_text(f"{start} {time.time()}")
"""


def test_a_semaphore_runs_at_most_n_commands_at_once(
    tmp_path: pathlib.Path, env: dict[str, str], spawned: list[subprocess.Popen[str]]
) -> None:
    runs = [
        start(spawned, "run", "batch", "--semaphore", "2", "--timeout", "30", "--",
              sys.executable, "-c", OVERLAPPING, str(tmp_path / f"run{index}"), env=env)
        for index in range(6)
    ]
    for process in runs:
        assert finish(process)[0] == 0
    spans = [
        tuple(map(float, (tmp_path / f"run{index}").read_text().split())) for index in range(6)
    ]
    events = sorted([(begin, 1) for begin, _ in spans] + [(end, -1) for _, end in spans],
                    key=lambda event: (event[0], event[1]))
    inside = most = 0
    for _, step in events:
        inside += step
        most = max(most, inside)
    assert most == 2


def test_a_full_semaphore_runs_nothing_and_says_who_holds_it(
    tmp_path: pathlib.Path, env: dict[str, str], spawned: list[subprocess.Popen[str]]
) -> None:
    holder = hold(spawned, tmp_path / "first", env, "--semaphore", "1", name="slots")
    marker = tmp_path / "ran"
    refused = tenure_command("run", "slots", "--semaphore", "1", "--no-wait", "--",
                             "touch", str(marker), env=env)
    assert refused.returncode == 75, refused.stderr
    assert "a permit of 'slots' is held" in refused.stderr
    assert f":{holder.pid} fence" in refused.stderr
    assert not marker.exists()
    mismatch = tenure_command("run", "slots", "--semaphore", "3", "--no-wait", "--",
                              "touch", str(marker), env=env)
    assert mismatch.returncode == 2 and "limit=1" in mismatch.stderr
    assert not marker.exists()
    for bad in ("0", "-1", "x"):
        wrong = tenure_command("run", "slots", "--semaphore", bad, "--", "touch", str(marker),
                               env=env)
        assert wrong.returncode == 2, (bad, wrong.stderr)
    assert not marker.exists()
    (tmp_path / "first" / "go").touch()
    assert finish(holder) == (0, "", "")


def test_weighted_runs_never_take_more_than_the_units(
    tmp_path: pathlib.Path, env: dict[str, str], spawned: list[subprocess.Popen[str]]
) -> None:
    weights = [3, 1, 2, 3, 1, 2]
    runs = [
        start(spawned, "run", "gpus", "--semaphore", "4", "--weight", str(weight),
              "--timeout", "60", "--", sys.executable, "-c", OVERLAPPING,
              str(tmp_path / f"run{index}"), env=env)
        for index, weight in enumerate(weights)
    ]
    for process in runs:
        assert finish(process)[0] == 0
    spans = [
        tuple(map(float, (tmp_path / f"run{index}").read_text().split()))
        for index in range(len(weights))
    ]
    events = sorted([(begin, weight) for (begin, _), weight in zip(spans, weights, strict=True)]
                    + [(end, -weight) for (_, end), weight in zip(spans, weights, strict=True)])
    inside = most = 0
    for _, step in events:  # at a tie, an end (negative) sorts first
        inside += step
        most = max(most, inside)
    assert 3 <= most <= 4


def test_a_weighted_waiter_is_shown_with_its_weight(
    tmp_path: pathlib.Path, env: dict[str, str], spawned: list[subprocess.Popen[str]]
) -> None:
    holder = hold(spawned, tmp_path / "first", env, "--semaphore", "4", "--weight", "3",
                  name="gpus")
    marker = tmp_path / "ran"
    # Two units are asked, one is free: refused, naming the units in use.
    refused = tenure_command("run", "gpus", "--semaphore", "4", "--weight", "2", "--no-wait",
                             "--", "touch", str(marker), env=env)
    assert refused.returncode == 75, refused.stderr
    assert "3 of 4 units in use" in refused.stderr and "weight 3" in refused.stderr
    waiter = start(spawned, "run", "gpus", "--semaphore", "4", "--weight", "2",
                   "--timeout", "60", "--", "touch", str(marker), env=env)
    deadline = time.monotonic() + 30
    while True:
        semaphore = json.loads(tenure_command("show", "gpus", "--json", env=env).stdout)
        assert semaphore["kind"] == "semaphore"  # (one object: no other primitive is "gpus")
        if semaphore["waiters"]:
            break
        assert time.monotonic() < deadline, "the waiter never queued"
        time.sleep(0.05)
    assert semaphore["units"] == 3 and semaphore["limit"] == 4
    assert [h["weight"] for h in semaphore["holders"]] == [3]
    (queued,) = semaphore["waiters"]
    assert queued["weight"] == 2 and queued["pid"] == waiter.pid and queued["mode"] is None
    # The text of a show that lists it, not the next show alone: in ci3 (beside a CPU-heavy
    # job) the next one listed no waiter, most likely a waiter kept from the CPU past its
    # place's 3 s QUEUE_TTL, out of the queue until its wait puts the place back.
    while "weight 2, since" not in (text := tenure_command("show", "gpus", env=env).stdout):
        assert time.monotonic() < deadline, text
        time.sleep(0.05)
    assert "units:    3 of 4 in use" in text
    assert not marker.exists()
    (tmp_path / "first" / "go").touch()
    assert finish(holder) == (0, "", "")
    assert finish(waiter)[0] == 0 and marker.exists()
    for bad in (["--weight", "2"], ["--semaphore", "4", "--weight", "5"],
                ["--semaphore", "4", "--weight", "0"]):
        wrong = tenure_command("run", "gpus", *bad, "--", "true", env=env)
        assert wrong.returncode == 2 and "weight" in wrong.stderr, (bad, wrong.stderr)
