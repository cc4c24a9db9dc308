"""The worker processes the scenarios drive: ``python -m safety.workers COMMAND CONFIG_JSON``.

Each worker is a real process using tenure's public API only. The lease it takes is a lock,
a semaphore's permit (config ``limit``; of ``weight`` units, or of one picked at random among
``weights`` section by section: scenario 17), one side of a read-write lock (``rw``: the sides to
pick from, section by section) or a campaign of an election (``election``). It appends
what it did to its own history file (``safety.history``) and talks to the controller in JSON
lines: commands on stdin, reports on stdout. Every worker ends itself at
``config["lifetime"]`` seconds at the latest, so nothing outlives a run that went wrong.

Commands:
- ``sections``: acquire / hold / release in a loop (random acquire style, hold and pause),
  optionally reading and writing the protected resource inside each section; until
  ``count`` sections are done, or SIGTERM.
- ``victim``: on ``go``, acquire, read the resource, ``check()``, report ``entered`` and
  wait for ``write`` (the controller pauses it right there), then write and release.
- ``holder``: on ``go``, acquire with renewal, report, and hold until killed.
- ``waiter``: on each ``wait``, acquire (blocking), report when, release.
- ``cut``: hold a renewed lock through a proxy; on ``cut``, time how the loss is learned and
  how long each call takes while the network is broken; on ``heal``, time the recovery.
- ``cancel``: cancel asyncio acquires and time out threaded ones mid-flight, then look for
  anything left behind.
- ``race``: contender threads try the same fresh lock at one instant, round after round.
- ``fuzz``: hostile names and wrong-typed arguments through the API (``safety.fuzz``).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import pathlib
import random
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import tenure
from safety.history import Attempt, Recorder, Section, now_ns
from safety.resource import ResourceClient

__all__ = ["main"]

Config = dict[str, Any]


def report(**fields: Any) -> None:
    print(json.dumps(fields), flush=True)


def command() -> list[str]:
    """The next command from the controller (empty when its end of the pipe closed)."""
    return sys.stdin.readline().split()


Held = tenure.Lock | tenure.Semaphore | tenure.Leadership
"""A mutex, one permit of a semaphore when the config gives a ``limit`` (scenario 12), one
side of a read-write lock when it gives ``rw`` (scenario 15), or a campaign of an election
when it gives ``election`` (scenario 16)."""


def _side(config: Config, rng: random.Random) -> str | None:
    """The side of a read-write lock the next lease takes, picked at random among the
    config's ``rw`` ("read", "write"); None without ``rw`` (a mutex or a permit)."""
    sides: list[str] | None = config.get("rw")
    return rng.choice(sides) if sides else None


def _weight(config: Config, rng: random.Random) -> int | None:
    """The units the next permit of a weighted semaphore takes (scenario 17): the config's
    ``weight``, or one picked at random among its ``weights``; None for any other lease."""
    if config.get("weight") is not None:
        return int(config["weight"])
    weights: list[int] | None = config.get("weights")
    return rng.choice(weights) if weights else None


def _lease(locks: tenure.Locks, config: Config, name: str | None = None, *, ttl: float,
           renew: bool = False, timeout: float | None = None,
           on_lost: Callable[[Any], Any] | None = None, side: str | None = None,
           weight: int | None = None) -> Held:
    """The handle a worker takes: ``config["limit"]`` makes it a permit of a semaphore (of
    ``weight`` units when given),
    ``side`` one side of the read-write lock of the name, ``config["election"]`` a candidate
    of the election of the name (its value the worker's name; leadership is always renewed,
    and a campaign waits as long as ``acquire`` is told to)."""
    name = config["name"] if name is None else name
    if config.get("election"):
        return locks.election(name, ttl=ttl).candidate(config["worker"], on_lost=on_lost)
    limit: int | None = config.get("limit")
    if limit is not None and weight is not None:
        return locks.semaphore(name, limit=limit, weight=weight, ttl=ttl, renew=renew,
                               timeout=timeout, on_lost=on_lost)
    if limit is not None:
        return locks.semaphore(name, limit=limit, ttl=ttl, renew=renew, timeout=timeout,
                               on_lost=on_lost)
    if side is not None:
        rw = locks.rwlock(name, ttl=ttl, renew=renew, timeout=timeout, on_lost=on_lost)
        return rw.read() if side == "read" else rw.write()
    return locks.lock(name, ttl=ttl, renew=renew, timeout=timeout, on_lost=on_lost)


def _release(lock: Held) -> str:
    try:
        lock.release()
    except tenure.LockLost:
        return "lost"
    except tenure.BackendError:
        return "error"
    return "ok"


def _sleep(bounds: list[float], rng: random.Random) -> None:
    low, high = bounds
    if high > 0:
        time.sleep(rng.uniform(low, high))


# ---- sections ------------------------------------------------------------------------------


class _Stop:
    def __init__(self) -> None:
        self.requested = False
        signal.signal(signal.SIGTERM, self._request)

    def _request(self, signum: int, frame: object) -> None:
        self.requested = True


def sections(config: Config, recorder: Recorder) -> None:
    """The sections loop; with ``threads``, that many loops on threads of this process, one
    client between them (a store that lives in its process, memory://, shared no other
    way), ``count`` split between them and each thread its own worker name."""
    stop = _Stop()
    locks = tenure.connect(config["url"])
    threads = int(config.get("threads") or 0)
    report(ready=True)
    if not threads:
        done = _sections(locks, config, recorder, stop, worker=config["worker"],
                         rng=random.Random(config["seed"]), count=config.get("count"))
    else:
        count: int | None = config.get("count")
        tally: list[int] = []
        failures: list[BaseException] = []

        def loop(index: int) -> None:
            share = None if count is None else count // threads + (index < count % threads)
            try:
                tally.append(_sections(locks, config, recorder, stop,
                                       worker=f"{config['worker']}.{index}",
                                       rng=random.Random(config["seed"] * 100 + index),
                                       count=share))
            except BaseException as exc:
                failures.append(exc)

        running = [threading.Thread(target=loop, args=(i,)) for i in range(threads)]
        for thread in running:
            thread.start()
        for thread in running:
            thread.join()
        if failures:
            raise failures[0]
        done = sum(tally)
    locks.close()
    report(done=done)


def _sections(locks: tenure.Locks, config: Config, recorder: Recorder, stop: _Stop, *,
              worker: str, rng: random.Random, count: int | None) -> int:
    resource = ResourceClient(config["resource"]) if config.get("resource") else None
    tolerate = bool(config.get("tolerate_errors", False))
    modes: list[str] = config.get("modes", ["blocking"])
    done = seq = 0
    config = {**config, "worker": worker}
    while not stop.requested and (count is None or done < count):
        style, side, weight = rng.choice(modes), _side(config, rng), _weight(config, rng)
        asked = now_ns()
        try:
            section = _one_section(locks, style, seq=seq + 1, resource=resource,
                                   config=config, rng=rng, side=side, weight=weight)
        except tenure.BackendError as exc:
            if not tolerate:
                raise
            recorder.event("backend-error", worker, error=str(exc)[:200])
            time.sleep(0.05)
            continue
        if section is not None:
            seq = section.seq
            recorder.write(section)
            done += 1
        elif style != "try":  # a waiting acquire gave up: what a starved waiter shows
            recorder.event("acquire-timeout", worker, side=side, weight=weight,
                           waited=(now_ns() - asked) / 1e9)
        _sleep(config.get("think", [0, 0]), rng)
    return done


def _one_section(
    locks: tenure.Locks,
    mode: str,
    *,
    seq: int,
    resource: ResourceClient | None,
    config: Config,
    rng: random.Random,
    side: str | None = None,
    weight: int | None = None,
) -> Section | None:
    """One attempt in the given acquire style (on ``side`` of a read-write lock, of
    ``weight`` units of a weighted semaphore); the section, or None if not acquired."""
    wait = float(config.get("acquire_timeout", 30.0))
    lock = _lease(locks, config, ttl=config["ttl"], renew=config.get("renew", False),
                  timeout=wait, side=side, weight=weight)
    asked = now_ns()
    if mode == "with":
        section = None
        try:
            with lock:
                section = _body(lock, worker=config["worker"], seq=seq, asked=asked,
                                resource=resource, config=config, rng=rng, side=side,
                                weight=weight)
        except tenure.LockTimeout:
            return None
        except (tenure.LockLost, tenure.BackendError) as exc:
            if section is None:  # the acquire failed, not the release
                raise
            if isinstance(exc, tenure.BackendError):
                return dataclasses.replace(section, release="error")
            return dataclasses.replace(section, release="lost", released=now_ns())
        return dataclasses.replace(section, released=now_ns())
    took = lock.acquire(blocking=False) if mode == "try" else lock.acquire(timeout=wait)
    if not took:
        return None
    section = _body(lock, worker=config["worker"], seq=seq, asked=asked, resource=resource,
                    config=config, rng=rng, side=side, weight=weight)
    outcome = _release(lock)
    return dataclasses.replace(section, release=outcome,
                               released=None if outcome == "error" else now_ns())


def _body(
    lock: Held,
    *,
    worker: str,
    seq: int,
    asked: int,
    resource: ResourceClient | None,
    config: Config,
    rng: random.Random,
    side: str | None,
    weight: int | None = None,
) -> Section:
    start = now_ns()
    fence = lock.fence
    key = f"{worker}:{seq}"
    read = wrote = None
    accepted = None
    if resource is not None:
        ok, value = resource.read(key, fence)
        read = value
        if ok:
            _sleep(config.get("hold", [0, 0]), rng)
            wrote = value + 1
            accepted = resource.write(key, fence, wrote)
        else:
            accepted = False
    else:
        _sleep(config.get("hold", [0, 0]), rng)
    lost = lock.lost.is_set()
    renewed = _renewed(lock)
    end = now_ns()
    return Section(worker, seq, lock.name, asked, start, end, fence, read, wrote, accepted, lost,
                   mode=side, renewed=renewed, weight=weight)


def _renewed(lock: Held) -> int | None:
    """When the lease's last successful renewal was sent (the observer's clock, ns), None
    when it was not renewed. The public handle does not say, so this reads its hold (the
    renewal scheduler sets ``lease_deadline`` to the renewal's send time plus what it
    vouches for); a handle without one (an election's candidate) answers None."""
    holds = getattr(lock, "_holds", None)
    owner = getattr(lock, "_owner", None)
    hold = holds.get(owner()) if holds is not None and owner is not None else None
    if hold is None or not hold.renewals:
        return None
    return round((hold.lease_deadline - hold.trusted_for) * 1e9)


# ---- scenario 3: the paused holder -----------------------------------------------------------


def victim(config: Config, recorder: Recorder) -> None:
    worker = config["worker"]
    # No resource for a semaphore's victim: its permits' holders rightly write side by side.
    resource = ResourceClient(config["resource"]) if config.get("resource") else None
    locks = tenure.connect(config["url"])
    rng = random.Random(config["seed"])
    seq = 0
    report(ready=True)
    while (words := command()) and words[0] == "go":
        seq += 1
        key = f"{worker}:{seq}"
        side = _side(config, rng)
        lock = _lease(locks, config, ttl=config["ttl"], renew=True, side=side)
        asked = now_ns()
        if not lock.acquire(timeout=30):
            report(entered=False)
            continue
        start = now_ns()
        fence = lock.fence
        value = wrote = accepted = None
        ok = False
        if resource is not None:
            ok, value = resource.read(key, fence)
        try:
            lock.check()  # all is well: the lease is live right now
            lapsed = False
        except tenure.LockLost:
            # Its renewal came too late on a loaded machine (ci13: 1 s without one): told,
            # as promised, but before any disturbance, so the section shows nothing. It is
            # recorded as told, and the controller has the victim take the lock again.
            lapsed = True
        if lapsed:
            report(entered=False, lapsed=True)
        else:
            report(entered=True, fence=fence)
            command()  # "write": the controller paused us just before this point
            if resource is not None and value is not None:
                wrote = value + 1
                accepted = resource.write(key, fence, wrote) if ok else False
        lost = lapsed or lock.lost.is_set()
        end = now_ns()
        outcome = _release(lock)
        recorder.write(Section(worker, seq, lock.name, asked, start, end, fence, value,
                               wrote if ok else None, accepted, lost, outcome, side))
        if lapsed:
            continue
        # Its wall clock too: scenario 10 checks that a jump of it reached this process.
        report(done=True, accepted=accepted, lost=lost, release=outcome, wall=time.time())
    locks.close()


# ---- scenario 4: killed holders --------------------------------------------------------------


def holder(config: Config, recorder: Recorder) -> None:
    locks = tenure.connect(config["url"])
    # A holder killed later cannot record its own section: it reports a loss the moment it
    # learns of it, so that the controller's record of its section says it was told. A loss
    # before its "acquired" report (a renewal failing at once) travels inside that report.
    told = threading.Lock()
    state: dict[str, Any] = {"reported": False, "lost_at": None}

    def on_lost(_: Any) -> None:
        with told:
            if state["reported"]:
                report(lost=True, at=now_ns())
            else:
                state["lost_at"] = now_ns()

    side = _side(config, random.Random(config["seed"]))
    weight = _weight(config, random.Random(config["seed"]))
    lock = _lease(locks, config, ttl=config["ttl"], renew=True, on_lost=on_lost, side=side,
                  weight=weight)
    report(ready=True)
    command()  # "go": started ahead of its turn, so that start-up costs no trial time
    asked = now_ns()
    if not lock.acquire(timeout=30):
        report(acquired=False)
        return
    start = now_ns()
    read = wrote = accepted = None
    if config.get("resource"):
        # Scenario 13's holder across a failover: it writes under its fence before the
        # primary dies, so that a fence given again after the promotion meets its write.
        resource = ResourceClient(config["resource"])
        ok, read = resource.read(f"{config['worker']}:1", lock.fence)
        accepted = False
        if ok:
            wrote = read + 1
            accepted = resource.write(f"{config['worker']}:1", lock.fence, wrote)
    with told:
        report(acquired=True, asked=asked, start=start, fence=lock.fence,
               lost_at=state["lost_at"], side=side, weight=weight)
        state["reported"] = True
    # Until SIGKILL (a holder under test), or "release" (a semaphore's filler, or scenario
    # 13's holder, which records its own section: the controller cannot know whether it was
    # told of a loss).
    if command()[:1] == ["release"]:
        fence = lock.fence
        lost = lock.lost.is_set()
        end = now_ns()
        outcome = _release(lock)
        recorder.write(Section(config["worker"], 1, lock.name, asked, start, end, fence,
                               read, wrote, accepted, lost=lost, release=outcome, mode=side,
                               weight=weight))
        report(done=True)
    locks.close()


def waiter(config: Config, recorder: Recorder) -> None:
    worker = config["worker"]
    locks = tenure.connect(config["url"])
    rng = random.Random(config["seed"])
    seq = 0
    report(ready=True)
    while (words := command()) and words[0] == "wait":
        name = words[1] if len(words) > 1 else config["name"]
        seq += 1
        side, weight = _side(config, rng), _weight(config, rng)
        lock = _lease(locks, config, name, ttl=config["ttl"], side=side, weight=weight)
        asked = now_ns()
        try:
            took = lock.acquire(timeout=float(config["acquire_timeout"]))
        except tenure.BackendError as exc:
            report(acquired=False, error=str(exc)[:200])
            continue
        if not took:
            report(acquired=False, error="timeout")
            continue
        start = now_ns()
        fence = lock.fence
        end = now_ns()
        outcome = _release(lock)
        recorder.write(Section(worker, seq, name, asked, start, end, fence, release=outcome,
                               mode=side, weight=weight))
        report(acquired=True, asked=asked, start=start, fence=fence, side=side, weight=weight)
    locks.close()


# ---- scenario 6: a connection cut under a renewed lock -------------------------------------


def _timed(call: Callable[[], object]) -> dict[str, Any]:
    began = time.monotonic()
    try:
        result = call()
        outcome = f"returned {result!r}"
    except tenure.TenureError as exc:
        outcome = type(exc).__name__
    return {"seconds": round(time.monotonic() - began, 4), "outcome": outcome}


def _acquire_before_the_cut(lock: tenure.Lock, timeout: float) -> bool:
    """``lock.acquire`` through a proxy that still passes everything. A BackendError here is
    a loaded machine's call outlasting the scenario's shortened operation timeout (ci17 on
    MySQL: "Lost connection to MySQL server during query (timed out)"), not what the
    scenario tests: the acquire is made again, within ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return lock.acquire(timeout=max(0.0, deadline - time.monotonic()))
        except tenure.BackendError:
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.1)


def cut(config: Config, recorder: Recorder) -> None:
    """Two renewed locks through the proxy: ``watched`` is only watched (its ``lost`` is set
    by the renewal scheduler alone), ``checked`` is polled with ``check()`` (which marks it
    lost itself once its lease has run out): the first times the watchdog, the second what
    a careful holder knows."""
    worker = config["worker"]
    ttl = float(config["ttl"])
    locks = tenure.connect(config["url"])
    watched = locks.lock(config["name"] + ":watched", ttl=ttl, renew=True)
    checked = locks.lock(config["name"], ttl=ttl, renew=True)
    asked = now_ns()
    if not (_acquire_before_the_cut(checked, 30) and _acquire_before_the_cut(watched, 30)):
        report(acquired=False)
        return
    start = now_ns()
    fence = checked.fence
    report(acquired=True, fence=fence)
    command()  # "cut": the proxy now drops or resets everything
    cut_at = last_ok = now_ns()
    lost_at = checked_at = None
    deadline = time.monotonic() + float(config["watch"])
    while (lost_at is None or checked_at is None) and time.monotonic() < deadline:
        if lost_at is None and watched.lost.is_set():
            lost_at = now_ns()
        if checked_at is None:
            try:
                checked.check()
                last_ok = now_ns()
            except tenure.LockLost:
                checked_at = now_ns()
        time.sleep(0.002)
    # Every call at once, each in its own thread: each is timed on its own, and a broken
    # network costs one timeout, not five in a row.
    attempts: dict[str, Callable[[], object]] = {
        "release": checked.release,
        "release (watched)": watched.release,
        "acquire(timeout=0.5)": lambda: locks.lock(config["name"] + ":other",
                                                   ttl=ttl).acquire(timeout=0.5),
        "inspect": lambda: locks.inspect(config["name"]),
        "locked": checked.locked,
    }
    calls: dict[str, dict[str, Any]] = {}
    threads = [threading.Thread(target=lambda k=key, f=call: calls.__setitem__(k, _timed(f)))
               for key, call in attempts.items()]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    # The careful holder's section ends at its last passing check().
    recorder.write(Section(worker, 1, checked.name, asked, start, last_ok, fence,
                           lost=checked_at is not None, release=calls["release"]["outcome"]))
    report(cut_at=cut_at, lost_at=lost_at, checked_at=checked_at, calls=calls)
    command()  # "heal"
    healed = time.monotonic()
    again = locks.lock(config["name"] + ":after", ttl=ttl)
    recovered = None
    while recovered is None and time.monotonic() < healed + float(config["watch"]):
        try:
            if again.acquire(timeout=1.0):
                recovered = time.monotonic() - healed
                again.release()
        except tenure.BackendError:
            time.sleep(0.05)
    report(recovered=recovered)
    with contextlib.suppress(tenure.TenureError):
        locks.close()


# ---- scenario 7: cancelled and timed-out acquires --------------------------------------------


async def _cancel_async(locks: tenure.AsyncLocks, config: Config, count: int,
                        rng: random.Random) -> dict[str, int]:
    prefix = config["name"]
    ttl = float(config["ttl"])
    took = 0
    blocker = locks.lock(f"{prefix}:contended", ttl=ttl * 20)
    for attempt in range(count):
        contended = attempt % 2 == 1
        name = f"{prefix}:contended" if contended else f"{prefix}:free:{attempt % 8}"
        if contended:
            await blocker.acquire()
        lock = locks.lock(name, ttl=ttl, renew=True)
        task = asyncio.create_task(lock.acquire(timeout=ttl * 4))
        # Cancel before, during or after the round trip; when contended, let the holder go
        # at about the same moment, so the grant and the cancellation race.
        await asyncio.sleep(rng.uniform(0, 0.003))
        if contended and rng.random() < 0.5:
            await blocker.release()
        task.cancel()
        try:
            if await task:
                took += 1
                await lock.release()
        except asyncio.CancelledError:
            pass
        if blocker.fence is not None:
            await blocker.release()
    return {"async_attempts": count, "async_acquired": took}


def _timeout_threads(config: Config, count: int, rng: random.Random) -> dict[str, int]:
    prefix = config["name"]
    ttl = float(config["ttl"])
    took = timed_out = unanswered = 0
    with tenure.connect(config["url"]) as locks:
        for attempt in range(count):
            name = f"{prefix}:timeout:{attempt % 8}"
            blocker = locks.lock(name, ttl=ttl * 20)
            blocker.acquire()
            wait = rng.uniform(0.001, 0.02)
            # The holder lets go at about the moment the waiter gives up.
            timer = threading.Timer(wait * rng.uniform(0.7, 1.3), blocker.release)
            timer.start()
            lock = locks.lock(name, ttl=ttl, renew=True)
            try:
                if lock.acquire(timeout=wait):
                    took += 1
                    lock.release()
                else:
                    timed_out += 1
            except tenure.BackendError:
                # No answer within the timeout plus the grace the API gives a round trip (a
                # loaded machine): an unknown outcome, which must leave nothing behind all
                # the same; the checks after this run say whether it did.
                unanswered += 1
            timer.join()
    return {"thread_attempts": count, "thread_acquired": took, "thread_timed_out": timed_out,
            "thread_unanswered": unanswered}


async def _cancel_all(config: Config) -> dict[str, Any]:
    rng = random.Random(config["seed"])
    thread_rng = random.Random(rng.random())
    count = int(config["count"])
    ttl = float(config["ttl"])
    async with tenure.connect_async(config["url"]) as locks:
        # Both at once: the event loop cancels while a thread times out.
        in_loop, in_thread = await asyncio.gather(
            _cancel_async(locks, config, count // 2, rng),
            asyncio.to_thread(_timeout_threads, config, count - count // 2, thread_rng),
        )
    figures: dict[str, Any] = {**in_loop, **in_thread}
    # On a networked store a cancelled acquire's undo runs in the background (docs/api.md,
    # "Failure"); closing the client waits a moment for it (CLEANUP_GRACE). So "right after"
    # is once the undo steps had that chance: what they left is judged, not how soon a
    # loaded machine ran them (ci12 saw a PostgreSQL undo not yet run when the listing
    # came, under a load of 14). An undo that failed or never ran still shows.
    async with tenure.connect_async(config["url"]) as locks:
        held = [i.name for i in await locks.list_locks(config["name"]) if i.held]
        figures["held_right_after"] = held
        await asyncio.sleep(3 * ttl)
        held = [i.name for i in await locks.list_locks(config["name"]) if i.held]
        figures["held_after_3_ttl"] = held
        # The async scheduler's task now runs on the process's renewal thread
        # (``tenure-renewal-loop``, which stays, idle): this loop should hold none, and a
        # renewal leaked there would keep its lease held, which held_after_3_ttl shows. The
        # threads flavour's scheduler thread ends once it renews nothing.
        figures["renewer_tasks_after_3_ttl"] = sum(
            1 for t in asyncio.all_tasks() if t.get_name() == "tenure-renewer"
        )
        figures["renewer_threads_after_3_ttl"] = sum(
            1 for t in threading.enumerate() if t.name == "tenure-renewer"
        )
    return figures


def cancel(config: Config, recorder: Recorder) -> None:
    figures = asyncio.run(_cancel_all(config))
    recorder.event("cancel-summary", config["worker"], **figures)
    report(**figures)


# ---- scenario 8: exactly one winner ----------------------------------------------------------


def race(config: Config, recorder: Recorder) -> None:
    worker = config["worker"]
    threads = int(config["threads"])
    locks = tenure.connect(config["url"])
    winners: list[tenure.Lock] = []
    report(ready=True)
    while words := command():
        if words[0] == "round":
            number, at = int(words[1]), int(words[2])
            handles = [locks.lock(f"{config['name']}:{number}", ttl=config["ttl"])
                       for _ in range(threads)]
            results: list[Attempt] = []

            def contend(index: int, handles: list[tenure.Lock] = handles,
                        results: list[Attempt] = results, number: int = number,
                        at: int = at) -> None:
                pause = (at - now_ns()) / 1e9
                if pause > 0.002:
                    time.sleep(pause - 0.002)
                while now_ns() < at:  # spin the last moments: start together
                    pass
                try:
                    won = handles[index].acquire(blocking=False)
                    results.append(Attempt(number, f"{worker}.{index}", won,
                                           handles[index].fence))
                except tenure.TenureError as exc:
                    results.append(Attempt(number, f"{worker}.{index}", False, None,
                                           type(exc).__name__))

            running = [threading.Thread(target=contend, args=(i,)) for i in range(threads)]
            for thread in running:
                thread.start()
            for thread in running:
                thread.join()
            for attempt in results:
                recorder.write(attempt)
            winners = [handle for handle in handles if handle.fence is not None]
            report(round=number, won=sum(1 for r in results if r.won))
        elif words[0] == "release":
            for handle in winners:
                _release(handle)
            winners = []
            report(released=True)
        else:
            break
    locks.close()


# ---- entry point -----------------------------------------------------------------------------


def _fuzz(config: Config, recorder: Recorder) -> None:
    from safety import fuzz

    figures = fuzz.run(config)
    recorder.event("fuzz-summary", config["worker"], **figures)
    report(**figures)


COMMANDS: dict[str, Callable[[Config, Recorder], None]] = {
    "sections": sections,
    "victim": victim,
    "holder": holder,
    "waiter": waiter,
    "cut": cut,
    "cancel": cancel,
    "race": race,
    "fuzz": _fuzz,
}


def _orphan_watch(parent: int) -> None:
    """End this worker soon after its controller is gone (killed, crashed)."""
    while os.getppid() == parent:
        time.sleep(0.5)
    os._exit(4)


def main(argv: list[str]) -> None:
    name, raw = argv
    config: Config = json.loads(raw)
    # The watchdogs: whatever happens, this process ends by its lifetime, and soon after
    # the controller that started it.
    watchdog = threading.Timer(float(config.get("lifetime", 600)), os._exit, (3,))
    watchdog.daemon = True
    watchdog.start()
    threading.Thread(target=_orphan_watch, args=(os.getppid(),), daemon=True).start()
    recorder = Recorder(pathlib.Path(config["history"]))
    try:
        COMMANDS[name](config, recorder)
    finally:
        recorder.close()


if __name__ == "__main__":
    main(sys.argv[1:])
