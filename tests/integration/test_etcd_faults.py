"""etcd members SIGKILLed under a 3-node cluster of the test's own (``dedicated_etcd``): one
follower gone changes nothing, two gone is a BackendError within the ``timeout`` option and
leaves nothing behind, and a leader killed while 8 processes contend loses no update and
never hands out a fence out of order.

The contention worker is shared with ``test_zookeeper_faults`` (it runs any URL):

    python -m tests.integration.test_etcd_faults contend URL NAME COUNTER START OUT ROUNDS
        connect, print "ready", wait until the file START exists, then ROUNDS times: take the
        lock (retrying on BackendError: an election), read "<count> <fence>" from COUNTER,
        write "<count + 1> <our fence>" back (a non-atomic read-modify-write: an overlap loses
        an update), release. One line per turn to OUT: "<entered ns> <left ns> <fence>
        <stale>", time.monotonic_ns() just after acquire returned and just before release;
        <stale> is 1 when the file already carried a fence >= ours. Prints "errors <n>": the
        BackendErrors it retried.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import os
import pathlib
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import pytest

import tenure
from tests.integration.processes import ROOT
from tests.servers.etcd import EtcdCluster

pytestmark = [pytest.mark.etcd, pytest.mark.slow]

REQUEST_TIMEOUT = 1.5
"""The ``timeout`` option: seconds for each request's reply, across members."""


# ---- the contention worker and its driver (shared with test_zookeeper_faults) -----------------


def contend(url: str, name: str, counter: str, start: str, out: str, rounds: int) -> None:
    file = pathlib.Path(counter)
    lines = []
    errors = 0
    with tenure.connect(url, timeout=REQUEST_TIMEOUT) as locks:
        for attempt in range(5):  # connect before the start line (a loaded host is slow)
            try:
                locks.inspect(name)
                break
            except tenure.BackendError:
                if attempt == 4:
                    raise
        print("ready", flush=True)
        deadline = time.monotonic() + 60  # never outlive a test that gave up on us
        while not pathlib.Path(start).exists():
            if time.monotonic() > deadline:
                raise SystemExit("never told to start")
            time.sleep(0.005)
        lock = locks.lock(name, ttl=3)
        done = 0
        while done < rounds:
            if time.monotonic() > deadline + 60:
                raise SystemExit(f"{done} of {rounds} turns in 60 s")
            try:
                if not lock.acquire(timeout=30):
                    raise SystemExit(f"no lock {name!r} within 30 s")
            except tenure.BackendError:
                errors += 1
                time.sleep(0.05)
                continue
            entered = time.monotonic_ns()
            count, fence = map(int, file.read_text().split())
            stale = int(lock.fence is None or fence >= lock.fence)
            time.sleep(0.001)  # invite a race if exclusion were broken
            file.write_text(f"{count + 1} {lock.fence}")
            left = time.monotonic_ns()
            lines.append(f"{entered} {left} {lock.fence} {stale}")
            done += 1
            try:
                lock.release()
            except (tenure.BackendError, tenure.LockLost):
                errors += 1  # the lease runs out on its own; the turn itself was done
    pathlib.Path(out).write_text("\n".join(lines) + "\n")
    print(f"errors {errors}", flush=True)


@dataclasses.dataclass
class Turn:
    entered: int
    left: int
    fence: int
    stale: bool


@contextlib.contextmanager
def contenders(url: str, name: str, tmp: pathlib.Path, processes: int, rounds: int
               ) -> Iterator[tuple[list[subprocess.Popen[str]], pathlib.Path]]:
    """Start ``processes`` contention workers, all connected, then let them go; yields them
    and the counter file, and kills any still running on the way out."""
    counter = tmp / "counter.txt"
    counter.write_text("0 0")
    start = tmp / "start"
    running: list[subprocess.Popen[str]] = []
    try:
        for index in range(processes):
            running.append(subprocess.Popen(
                [sys.executable, "-m", "tests.integration.test_etcd_faults", "contend", url,
                 name, str(counter), str(start), str(tmp / f"turns-{index}.txt"), str(rounds)],
                cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            ))
        for process in running:
            assert process.stdout is not None
            line = process.stdout.readline()
            assert line.strip() == "ready", line + (process.stderr.read() if process.stderr
                                                    else "")
        start.touch()
        yield running, counter
    finally:
        for process in running:
            if process.poll() is None:
                process.kill()
                process.communicate()


def turns_of(running: list[subprocess.Popen[str]], tmp: pathlib.Path, timeout: float
             ) -> tuple[list[Turn], int]:
    """Every turn of every worker, in order of entry, and the BackendErrors they retried."""
    errors = 0
    for process in running:
        out, err = process.communicate(timeout=timeout)
        assert process.returncode == 0, f"worker failed ({process.returncode}): {err}"
        errors += int(out.split()[-1])
    turns = [
        Turn(int(entered), int(left), int(fence), stale == "1")
        for path in sorted(tmp.glob("turns-*.txt"))
        for entered, left, fence, stale in (line.split() for line in path.read_text().splitlines())
    ]
    return sorted(turns, key=lambda turn: turn.entered), errors


def assert_exclusive(turns: list[Turn], counter: pathlib.Path, expected: int) -> None:
    """0 overlaps, 0 lost updates, fences strictly increasing in order of entry."""
    overlaps = [(a, b) for a, b in itertools.pairwise(turns) if b.entered < a.left]
    assert overlaps == [], f"{len(overlaps)} overlapping turns: {overlaps[:3]}"
    assert len(turns) == expected
    assert int(counter.read_text().split()[0]) == expected, "an update was lost"
    assert not any(turn.stale for turn in turns), "a holder saw a fence >= its own"
    fences = [turn.fence for turn in turns]
    assert all(a < b for a, b in itertools.pairwise(fences)), fences


def wait_for_turns(counter: pathlib.Path, count: int, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while int((counter.read_text().split() or ["0"])[0]) < count:  # "": mid-write
        assert time.monotonic() < deadline, f"fewer than {count} turns in {timeout} s"
        time.sleep(0.01)


# ---- etcd ---------------------------------------------------------------------------------------


def _followers(cluster: EtcdCluster) -> list[int]:
    leader = cluster.leader()
    return [index for index, member in enumerate(cluster.members) if member is not leader]


def test_one_follower_killed_locks_still_granted_and_exclusive(
    dedicated_etcd: EtcdCluster, name: str
) -> None:
    victim = dedicated_etcd.members[_followers(dedicated_etcd)[0]]
    victim.server.kill()
    intervals: list[tuple[int, int, int]] = []
    failures: list[BaseException] = []

    def client() -> None:
        try:
            with tenure.connect(dedicated_etcd.url, timeout=REQUEST_TIMEOUT) as locks:
                lock = locks.lock(name, ttl=5)
                for _ in range(10):
                    assert lock.acquire(timeout=10)
                    entered = time.monotonic_ns()
                    time.sleep(0.005)
                    left = time.monotonic_ns()
                    intervals.append((entered, left, lock.fence or 0))
                    lock.release()
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=client) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert failures == []
    intervals.sort()
    assert len(intervals) == 20
    assert all(a[1] <= b[0] for a, b in itertools.pairwise(intervals))
    fences = [fence for _, _, fence in intervals]
    assert all(a < b for a, b in itertools.pairwise(fences)), fences
    with tenure.connect(dedicated_etcd.url) as locks:
        info = locks.inspect(name)
        assert info is not None and not info.held and info.fence == fences[-1]


def test_two_killed_is_a_backend_error_within_the_timeout_and_leaves_nothing(
    dedicated_etcd: EtcdCluster, name: str
) -> None:
    ttl = 2.0
    with tenure.connect(dedicated_etcd.url, timeout=REQUEST_TIMEOUT) as locks:
        warm = locks.lock(name, ttl=ttl)
        assert warm.acquire(timeout=5)
        warm_fence = warm.fence or 0
        warm.release()
        victims = [dedicated_etcd.members[index] for index in _followers(dedicated_etcd)]
        for member in victims:
            member.server.kill()
        try:
            started = time.monotonic()
            with pytest.raises(tenure.BackendError) as raised:
                locks.lock(name, ttl=ttl).acquire(timeout=10)
            elapsed = time.monotonic() - started
            assert raised.value.__cause__ is not None
            # One request's timeout, then the undo retries until the lease it may have left
            # would have run out (ttl), its last try bounded by the timeout again.
            assert elapsed < REQUEST_TIMEOUT + ttl + REQUEST_TIMEOUT + 1.0, elapsed
        finally:
            for member in victims:
                member.server.start()
        dedicated_etcd.wait_healthy(timeout=30)
        # Anything the lone member had accepted was committed by now, and a lease it may
        # have granted has run out: the name is free.
        time.sleep(ttl + 1.0)
        # (No record at all is free too: the name's fence record goes with its holder's
        # lease, gc_after on etcd, so a holder that never released leaves none.)
        info = locks.inspect(name)
        assert info is None or (not info.held and info.holder is None)
        again = locks.lock(name, ttl=ttl)
        assert again.acquire(blocking=False)
        # Fences never go back: above the warm-up's, and above the record's where one is left.
        last = max(warm_fence, info.fence if info is not None and info.fence else 0)
        assert again.fence is not None and again.fence > last, (again.fence, last)
        again.release()


def test_leader_killed_while_eight_processes_contend(
    dedicated_etcd: EtcdCluster, name: str, tmp_path: pathlib.Path
) -> None:
    processes, rounds = 8, 8
    with contenders(dedicated_etcd.url, name, tmp_path, processes, rounds) as (running, counter):
        wait_for_turns(counter, 10)
        leader = dedicated_etcd.leader()
        leader.server.kill()
        killed = time.monotonic_ns()
        turns, _errors = turns_of(running, tmp_path, timeout=90)
    assert_exclusive(turns, counter, processes * rounds)
    assert any(turn.entered > killed for turn in turns), "no turn after the leader died"
    survivors = [m for m in dedicated_etcd.members if m is not leader]
    dedicated_etcd.wait_healthy(members=survivors)
    assert dedicated_etcd.leader() is not leader


def main(argv: list[str]) -> None:
    command, url, name, counter, start, out, rounds = argv
    if command != "contend":
        raise SystemExit(f"unknown worker command {command!r}")
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    contend(url, name, counter, start, out, int(rounds))


if __name__ == "__main__":
    main(sys.argv[1:])


def test_a_hung_member_does_not_keep_renewals_from_the_others(
    dedicated_etcd: EtcdCluster, name: str
) -> None:
    # The member the client talks to first is SIGSTOPped: it accepts connections and never
    # answers, so each request to it uses up its whole deadline. Renewals must move on to a
    # member that answers instead of returning to the hung one until the lease ends.
    first = dedicated_etcd.members[0]
    url = "etcd://" + ",".join(f"127.0.0.1:{m.client_port}" for m in dedicated_etcd.members)
    with tenure.connect(url, timeout=0.5) as locks:
        lock = locks.lock(name, ttl=3, renew=True)
        assert lock.acquire(timeout=5)
        first.server.pause()
        try:
            time.sleep(3 * 3)  # three leases' worth of renewals past the hung member
            assert not lock.lost.is_set()
            lock.check()
            lock.release()
        finally:
            first.server.resume()
