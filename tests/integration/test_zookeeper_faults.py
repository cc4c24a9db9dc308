"""ZooKeeper members SIGKILLed under a 3-node ensemble of the test's own
(``dedicated_zookeeper``): one follower gone changes nothing, two gone is a BackendError
within the ``timeout`` option and leaves nothing behind, a leader killed while 8 processes
contend loses no update and never hands out a fence out of order; and a holder frozen
(SIGSTOP) past its ttl, its session still alive, loses the lock by the ttl rule and is told.

A holder cut off from the ensemble (``safety.proxy`` blackholing its only server, the
shared ensemble untouched) while its ttl is longer than its session timeout: it is told of
the loss before a contender can be granted the name (the session's end frees the node long
before the ttl), whether it renews or not; and after a cut shorter than the session timeout
(same session, node still there) it is told too, and the node it no longer believes in is
deleted once the connection is back, so a contender gets the name at once.

The contention worker is ``test_etcd_faults``'s (it runs any URL). This module's own worker:

    python -m tests.integration.test_zookeeper_faults hold URL NAME TTL [SESSION_TIMEOUT]
        take the lock (ttl TTL, renewed), print "acquired <fence>", then wait for a line on
        stdin; then print "check ok" or "check LockLost" (``check()`` at once, before
        anything else), "lost <0|1>" (whether ``lost`` was set within 3 s) and "release ok"
        or "release LockLost".
"""

from __future__ import annotations

import itertools
import os
import pathlib
import signal
import subprocess
import sys
import threading
import time

import pytest
from safety.proxy import Proxy

import tenure
from tenure.backends.zookeeper._sync.store import ZooKeeperBackend
from tests.integration.processes import ROOT
from tests.integration.test_etcd_faults import (
    REQUEST_TIMEOUT,
    assert_exclusive,
    contenders,
    turns_of,
    wait_for_turns,
)
from tests.servers.zookeeper import ZooKeeperEnsemble

pytestmark = [pytest.mark.zookeeper, pytest.mark.slow]


def _followers(ensemble: ZooKeeperEnsemble) -> list[int]:
    leader = ensemble.leader()
    return [index for index, member in enumerate(ensemble.members) if member is not leader]


def test_one_follower_killed_locks_still_granted_and_exclusive(
    dedicated_zookeeper: ZooKeeperEnsemble, name: str
) -> None:
    victim = dedicated_zookeeper.members[_followers(dedicated_zookeeper)[0]]
    victim.server.kill()
    intervals: list[tuple[int, int, int]] = []
    failures: list[BaseException] = []

    def client() -> None:
        try:
            with tenure.connect(dedicated_zookeeper.url, timeout=REQUEST_TIMEOUT) as locks:
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
    with tenure.connect(dedicated_zookeeper.url) as locks:
        info = locks.inspect(name)
        assert info is not None and not info.held and info.fence == fences[-1]


def test_two_killed_is_a_backend_error_within_the_timeout_and_leaves_nothing(
    dedicated_zookeeper: ZooKeeperEnsemble, name: str
) -> None:
    ttl = 2.0
    with tenure.connect(dedicated_zookeeper.url, timeout=REQUEST_TIMEOUT) as locks:
        warm = locks.lock(name, ttl=ttl)
        assert warm.acquire(timeout=5)
        warm.release()
        victims = [dedicated_zookeeper.members[i] for i in _followers(dedicated_zookeeper)]
        for member in victims:
            member.server.kill()
        try:
            started = time.monotonic()
            with pytest.raises(tenure.BackendError) as raised:
                locks.lock(name, ttl=ttl).acquire(timeout=10)
            elapsed = time.monotonic() - started
            assert raised.value.__cause__ is not None
            # One request's timeout, then the undo retries until the node it may have left
            # would have expired (ttl), its last try bounded by the timeout again.
            assert elapsed < REQUEST_TIMEOUT + ttl + REQUEST_TIMEOUT + 1.0, elapsed
        finally:
            for member in victims:
                member.server.start()
        dedicated_zookeeper.wait_serving(timeout=30)
        # A create kazoo queued while cut off may have run on reconnect: its node's ttl has
        # run out by now, and the name is free.
        time.sleep(ttl + 1.0)
        info = locks.inspect(name)
        assert info is not None and not info.held and info.holder is None
        again = locks.lock(name, ttl=ttl)
        assert again.acquire(blocking=False)
        assert again.fence is not None and info.fence is not None and again.fence > info.fence
        again.release()


def test_leader_killed_while_eight_processes_contend(
    dedicated_zookeeper: ZooKeeperEnsemble, name: str, tmp_path: pathlib.Path
) -> None:
    processes, rounds = 8, 8
    url = dedicated_zookeeper.url
    with contenders(url, name, tmp_path, processes, rounds) as (running, counter):
        wait_for_turns(counter, 10)
        leader = dedicated_zookeeper.leader()
        leader.server.kill()
        killed = time.monotonic_ns()
        turns, _errors = turns_of(running, tmp_path, timeout=90)
    assert_exclusive(turns, counter, processes * rounds)
    assert any(turn.entered > killed for turn in turns), "no turn after the leader died"
    survivors = [m for m in dedicated_zookeeper.members if m is not leader]
    dedicated_zookeeper.wait_serving(members=survivors)
    assert dedicated_zookeeper.leader() is not leader


def test_a_frozen_holder_loses_the_lock_by_its_ttl_and_is_told(
    zookeeper_url: str, name: str
) -> None:
    """SIGSTOP for 3 s: past the ttl (1 s), well within the session timeout (10 s), so the
    holder's ephemeral node stays; the contender removes it by the ttl rule (kazoo's own
    Lock would wait for the session to end)."""
    ttl, frozen = 1.0, 3.0
    holder = subprocess.Popen(
        [sys.executable, "-m", "tests.integration.test_zookeeper_faults", "hold",
         zookeeper_url, name, str(ttl)],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdin is not None
        line = holder.stdout.readline()
        assert line.startswith("acquired"), line + (holder.stderr.read() if holder.stderr
                                                    else "")
        holder_fence = int(line.split()[1])
        with tenure.connect(zookeeper_url) as locks:
            contender = locks.lock(name, ttl=10)
            time.sleep(2 * ttl)  # renewals keep the holder's lease past its ttl
            assert contender.acquire(blocking=False) is False
            os.kill(holder.pid, signal.SIGSTOP)
            stopped = time.monotonic()
            try:
                assert contender.acquire(timeout=ttl + 5)
                elapsed = time.monotonic() - stopped
                # The last renewal came at most ttl/3 before the stop; a waiter looks again
                # at least every 0.5 s; a few round trips on a loaded shared host.
                assert elapsed <= ttl + 2.0, elapsed
                assert contender.fence is not None and contender.fence > holder_fence
                time.sleep(max(0.0, frozen - (time.monotonic() - stopped)))
            finally:
                os.kill(holder.pid, signal.SIGCONT)
            holder.stdin.write("report\n")
            holder.stdin.flush()
            report = [holder.stdout.readline().split() for _ in range(3)]
            assert report == [["check", "LockLost"], ["lost", "1"], ["release", "LockLost"]], (
                report
            )
            assert contender.owned()
            contender.release()
    finally:
        if holder.poll() is None:
            holder.kill()
        holder.communicate()


def test_a_holder_frozen_past_its_session_fails_check_the_moment_it_resumes(
    zookeeper_url: str, name: str
) -> None:
    """ttl 20 s, session timeout 2 s, SIGSTOP for 4 s: the server ends the frozen holder's
    session and a contender is granted the name. On SIGCONT the holder's very first
    ``check()``, before kazoo's thread has even looked at its socket, must fail: by its own
    clock, the lease was vouched for only 2/3 of the session timeout after its last renewal."""
    ttl, session_timeout, frozen = 20.0, 2.0, 4.0
    holder = subprocess.Popen(
        [sys.executable, "-m", "tests.integration.test_zookeeper_faults", "hold",
         zookeeper_url, name, str(ttl), str(session_timeout)],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdin is not None
        line = holder.stdout.readline()
        assert line.startswith("acquired"), line + (holder.stderr.read() if holder.stderr
                                                    else "")
        holder_fence = int(line.split()[1])
        # The line the holder reads first thing on resuming, queued while it is frozen.
        os.kill(holder.pid, signal.SIGSTOP)
        stopped = time.monotonic()
        holder.stdin.write("report\n")
        holder.stdin.flush()
        with tenure.connect(zookeeper_url) as locks:
            contender = locks.lock(name, ttl=10)
            try:
                assert contender.acquire(timeout=frozen + 5)
                assert time.monotonic() - stopped < ttl / 2  # by the session's end
                assert contender.fence is not None and contender.fence > holder_fence
                time.sleep(max(0.0, frozen - (time.monotonic() - stopped)))
            finally:
                os.kill(holder.pid, signal.SIGCONT)
            report = [holder.stdout.readline().split() for _ in range(3)]
            assert report == [["check", "LockLost"], ["lost", "1"], ["release", "LockLost"]], (
                report
            )
            contender.release()
    finally:
        if holder.poll() is None:
            holder.kill()
        holder.communicate()


def _through_proxy(ensemble: ZooKeeperEnsemble) -> Proxy:
    return Proxy(("127.0.0.1", ensemble.members[0].client_port))


def _session_id(locks: tenure.Locks) -> int:
    """The ZooKeeper session id of ``locks``' kazoo client (kazoo's ``client_id``)."""
    assert isinstance(locks.backend, ZooKeeperBackend)
    session: int = locks.backend.session.client().client_id[0]
    return session


def _wait_for(condition: threading.Event, timeout: float) -> float:
    """Seconds until ``condition`` (fails the test after ``timeout``)."""
    began = time.monotonic()
    assert condition.wait(timeout), f"not within {timeout} s"
    return time.monotonic() - began


def test_a_holder_cut_off_is_told_before_its_session_ends_and_a_contender_gets_in(
    zookeeper_ensemble: ZooKeeperEnsemble, name: str
) -> None:
    """ttl 20 s, session timeout 4 s: the server ends the unreachable holder's session (and
    its nodes) about 4 s after the cut, and a contender is granted then, 16 s before the
    ttl would have told the holder. By that moment both of its leases must be known lost:
    the renewed one (``lost``, ``on_lost``) and the unrenewed one (``check()``)."""
    session_timeout, ttl = 4.0, 20.0
    lost_at: list[float] = []
    with _through_proxy(zookeeper_ensemble) as proxy, tenure.connect(
        f"zookeeper://127.0.0.1:{proxy.port}", session_timeout=session_timeout
    ) as cut, tenure.connect(zookeeper_ensemble.url) as others:
        renewed = cut.lock(name, ttl=ttl, renew=True,
                           on_lost=lambda _lock: lost_at.append(time.monotonic()))
        unrenewed = cut.lock(f"{name}:unrenewed", ttl=ttl, renew=False)
        assert renewed.acquire(blocking=False) and unrenewed.acquire(blocking=False)
        fences = renewed.fence, unrenewed.fence
        contender = others.lock(name, ttl=10)
        second = others.lock(f"{name}:unrenewed", ttl=10)
        proxy.set_mode("blackhole")
        cut_at = time.monotonic()
        try:
            assert contender.acquire(timeout=ttl)
            granted_at = time.monotonic()
            # Granted by the session's end (about session_timeout), not by the ttl.
            assert granted_at - cut_at < ttl - 5, granted_at - cut_at
            assert contender.fence is not None and fences[0] is not None
            assert contender.fence > fences[0]
            assert renewed.lost.is_set(), "a contender was granted; the holder not told"
            assert lost_at and lost_at[0] <= granted_at, (lost_at, granted_at)
            with pytest.raises(tenure.LockLost):
                renewed.check()
            # The unrenewed lease died with the same session: check() alone must say so.
            assert second.acquire(blocking=False)
            assert second.fence is not None and fences[1] is not None
            assert second.fence > fences[1]
            with pytest.raises(tenure.LockLost):
                unrenewed.check()
        finally:
            proxy.set_mode("pass")
        with pytest.raises(tenure.LockLost):
            renewed.release()
        with pytest.raises(tenure.LockLost):
            unrenewed.release()
        contender.release()
        second.release()


def test_a_short_cut_that_the_session_survives_is_reported_and_frees_the_name(
    zookeeper_ensemble: ZooKeeperEnsemble, name: str
) -> None:
    """Cut until the holder is told (kazoo's SUSPENDED, about two thirds of the 10 s session
    timeout), then heal: the session survives, so the holder's ephemeral node does too. The
    holder no longer believes in it; it must not keep the name from others until its ttl
    (30 s): a contender gets the name within a few seconds of the heal."""
    session_timeout, ttl = 10.0, 30.0
    told = threading.Event()
    with _through_proxy(zookeeper_ensemble) as proxy, tenure.connect(
        f"zookeeper://127.0.0.1:{proxy.port}", session_timeout=session_timeout
    ) as cut, tenure.connect(zookeeper_ensemble.url) as others:
        holder = cut.lock(name, ttl=ttl, renew=True, on_lost=lambda _lock: told.set())
        assert holder.acquire(blocking=False)
        fence = holder.fence
        session_id = _session_id(cut)
        contender = others.lock(name, ttl=10)
        assert contender.acquire(blocking=False) is False
        proxy.set_mode("blackhole")
        try:
            # Told before the server could have ended the session (session_timeout).
            assert _wait_for(told, session_timeout) < session_timeout
            assert holder.lost.is_set()
            with pytest.raises(tenure.LockLost):
                holder.check()
        finally:
            proxy.set_mode("pass")
        assert contender.acquire(timeout=8), "the doubted holder's node kept the name"
        assert contender.fence is not None and fence is not None and contender.fence > fence
        # Freed by the holder itself, not by the end of its session: the same one is back.
        assert _session_id(cut) == session_id
        assert holder.owned() is False
        with pytest.raises(tenure.LockLost):
            holder.release()
        contender.release()


def hold(url: str, name: str, ttl: float, session_timeout: float | None = None) -> None:
    if session_timeout is not None:
        url += f"?session_timeout={session_timeout}"
    with tenure.connect(url) as locks:
        lock = locks.lock(name, ttl=ttl, renew=True)
        lock.acquire()
        print(f"acquired {lock.fence}", flush=True)
        sys.stdin.readline()
        try:
            lock.check()
            print("check ok", flush=True)
        except tenure.LockLost:
            print("check LockLost", flush=True)
        print(f"lost {int(lock.lost.wait(3))}", flush=True)
        try:
            lock.release()
            print("release ok", flush=True)
        except tenure.LockLost:
            print("release LockLost", flush=True)


if __name__ == "__main__":
    command, url, name, ttl, *session = sys.argv[1:]
    if command != "hold":
        raise SystemExit(f"unknown worker command {command!r}")
    hold(url, name, float(ttl), float(session[0]) if session else None)
