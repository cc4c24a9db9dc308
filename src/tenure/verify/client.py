"""One client of ``tenure verify``'s workload (``tenure.verify.workload`` starts them): it
calls a store at random on the run's names and records every call as an ``Operation``.

When it holds nothing it acquires one of the names (non-blocking, or waiting a fraction of
the ttl), or reads the name (``locked()`` and ``inspect()``; an election's ``leader()``);
when it holds a lease it extends it, releases it, asks ``owned()``, lets it run out (it
stops using it), or pauses past its ttl before the next call, so that expiry, refusals and
"not ours" answers all happen. What it acquires is the run's primitive: a lock, a permit of
a semaphore, a read or (less often) a write lease of a read-write lock (the write side
taken as ``rwlock(name).write()`` or as the same lease's fair lock,
``lock(name, fair=True)``), or a campaign of an election whose value is the lease's name, so
that a ``leader()`` answer says which lease it read. Handles never renew on their own
(``renew=False``; a leadership's renewal is turned off): every call the store sees is a
recorded one. A lease whose handle already knows it lost (``lock.lost``) is left alone,
since the handle would answer without asking the store. An error or timeout is recorded as
an unknown outcome, and the client gives that lease up.
"""

from __future__ import annotations

import dataclasses
import random
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import tenure
from tenure.verify.history import Operation

if TYPE_CHECKING:
    from tenure.verify.workload import WorkloadOptions

__all__ = ["Client"]

WRITES = 0.3
"""The share of a read-write lock's acquires that take the write side."""


@dataclasses.dataclass
class _Held:
    name: str
    lease: str
    lock: Any
    """The handle holding the lease: a Lock, a Semaphore permit, a Leadership."""
    mode: str | None


class Client:
    def __init__(self, options: WorkloadOptions, prefix: str, seed: int, client: int,
                 grace: float) -> None:
        self.options = options
        self.primitive = options.primitive
        self.limit = options.semaphore or 1
        """A semaphore's permits (1 for the other primitives)."""
        self.names = [f"{prefix}{number}" for number in range(options.names)]
        self.random = random.Random(seed)
        self.client = client
        self.grace = grace
        """Seconds past the run's end to wait for the other clients before closing."""
        self.acquired = 0
        self.history: list[Operation] = []
        self.held: _Held | None = None
        # Handles given up, kept referenced: nothing of theirs runs, nothing is collected.
        self.abandoned: list[Any] = []

    def run(self, signals: tuple[Any, ...]) -> list[Operation]:
        ready, go, start, done, finish = signals
        looped = False
        try:
            try:
                locks = tenure.connect(self.options.url)
                # A first call, so that connecting is not part of the run.
                locks.inspect(self.names[0])
            finally:
                ready.put(self.client)
            with locks:
                self.locks = locks
                self.fair = locks.supports("fair")
                go.wait()
                looped = True
                try:
                    self._loop(start.value + self.options.seconds)
                finally:
                    done.put(self.client)
                finish.wait(self.grace + self.options.seconds)
        except BaseException:
            if not looped:
                done.put(self.client)  # failed before the run: the parent must not wait
            raise
        return self.history

    def _loop(self, end: float) -> None:
        ttl = self.options.ttl
        while time.monotonic() < end:
            if self.held is not None and self.held.lock.lost.is_set():
                self._give_up()
            if self.held is None:
                self._free_step()
            else:
                self._held_step()
            # Mostly short pauses; now and then one past the ttl, so leases expire under
            # their holders.
            pause = ttl * (1.1 if self.random.random() < 0.01 else self.random.uniform(0, 0.05))
            time.sleep(min(pause, max(0.0, end - time.monotonic())))

    def _give_up(self) -> None:
        assert self.held is not None
        self.abandoned.append(self.held.lock)
        self.held = None

    def _free_step(self) -> None:
        name = self.random.choice(self.names)
        choice = self.random.random()
        if choice < 0.6:
            self._acquire(name)
        elif self.primitive == "election":
            self.history.append(self._leader(name))
        elif choice < 0.8:
            self.history.append(self._locked(name))
        else:
            self.history.append(self._inspect(name))

    def _acquire(self, name: str) -> None:
        self.acquired += 1
        lease = f"{self.client}.{self.acquired}"
        mode = None
        if self.primitive == "rwlock":
            mode = "write" if self.random.random() < WRITES else "read"
        lock = self._handle(name, lease, mode)
        if self.random.random() < 0.5:
            call: Callable[[], Any] = lambda: lock.acquire(blocking=False)  # noqa: E731
        else:
            # A writer may wait out a reader left to run out (readers overlap: the name is
            # rarely free, and a short wait would hardly ever be granted).
            longest = self.options.ttl if mode == "write" else self.options.ttl / 5
            wait = self.random.uniform(0.0, longest)
            call = lambda: lock.acquire(timeout=wait)  # noqa: E731
        answer, op = self._call(call, name=name, kind="acquire", lease=lease,
                                ttl=self.options.ttl, mode=mode)
        if answer:
            self.history.append(dataclasses.replace(op, outcome="ok", fence=lock.fence))
            self.held = _Held(name, lease, lock, mode)
        elif op.outcome == "unknown":
            self.history.append(op)
            self.abandoned.append(lock)
        else:
            self.history.append(dataclasses.replace(op, outcome="fail"))

    def _locked(self, name: str) -> Operation:
        mode = None
        if self.primitive == "rwlock":
            mode = "write" if self.random.random() < 0.5 else "read"
        handle = self._handle(name, "", mode)
        answer, op = self._call(handle.locked, name=name, kind="locked", mode=mode)
        return op if op.outcome == "unknown" else dataclasses.replace(op, held=bool(answer))

    def _inspect(self, name: str) -> Operation:
        kind = "lock" if self.primitive == "election" else self.primitive
        answer, op = self._call(lambda: self.locks.inspect(name, kind), name=name,
                                kind="inspect")
        if op.outcome == "unknown":
            return op
        if self.primitive == "semaphore":
            # A semaphore's inspect is checked as locked(): all permits taken or not.
            full = answer is not None and len(answer.leases) >= self.limit
            return dataclasses.replace(op, held=full)
        if self.primitive == "rwlock":
            return dataclasses.replace(op, **_listed(answer))
        # Held or not only: the fence inspect reports is not the holder's on every store
        # (Redlock's is the largest counter of the nodes read, which refused attempts also
        # move).
        return dataclasses.replace(op, held=answer is not None and answer.holder is not None)

    def _leader(self, name: str) -> Operation:
        answer, op = self._call(self.locks.election(name, ttl=self.options.ttl).leader,
                                name=name, kind="leader")
        if op.outcome == "unknown":
            return op
        if answer is None:
            return dataclasses.replace(op, held=False)
        return dataclasses.replace(op, held=True, lease=answer.value, fence=answer.term)

    def _held_step(self) -> None:
        held = self.held
        assert held is not None
        choice = self.random.random()
        base = {"name": held.name, "lease": held.lease, "mode": held.mode}
        if choice < 0.45:
            ttl = self.options.ttl
            answer, op = self._call(held.lock.extend, kind="extend", ttl=ttl, **base)
            self.history.append(op)
            if op.outcome != "ok":
                self._give_up()
        elif choice < 0.8:
            release = held.lock.resign if self.primitive == "election" else held.lock.release
            answer, op = self._call(release, kind="release", **base)
            self.history.append(op)
            self.held = None
        elif choice < 0.95:
            answer, op = self._call(held.lock.owned, kind="owned", **base)
            if op.outcome != "unknown":
                op = dataclasses.replace(op, held=bool(answer))
            self.history.append(op)
            if not answer:
                self._give_up()
        else:
            self._give_up()  # let it run out

    def _handle(self, name: str, lease: str, mode: str | None) -> Any:
        """A new handle on ``name``: a lock, one permit of the semaphore, one side of the
        read-write lock, or a candidate of the election campaigning with ``lease``."""
        ttl = self.options.ttl
        if self.primitive == "semaphore":
            return self.locks.semaphore(name, limit=self.limit, ttl=ttl)
        if self.primitive == "rwlock":
            if mode == "read":
                return self.locks.rwlock(name, ttl=ttl).read()
            if self.fair and self.random.random() < 0.5:
                return self.locks.lock(name, ttl=ttl, fair=True)  # the same write lease
            return self.locks.rwlock(name, ttl=ttl).write()
        if self.primitive == "election":
            candidate = self.locks.election(name, ttl=ttl).candidate(value=lease)
            candidate.renew = False  # a leadership renews itself: not here (module docstring)
            return candidate
        return self.locks.lock(name, ttl=ttl)

    def _call(self, call: Callable[[], Any], **fields: Any) -> tuple[Any, Operation]:
        """Make ``call`` and record it: ok, fail (LockLost / NotOwned), or unknown (any other
        error)."""
        fields.update(primitive=self.primitive, limit=self.limit)
        invoked = time.monotonic()
        try:
            answer = call()
        except (tenure.LockLost, tenure.NotOwned):
            return None, Operation(client=self.client, invoked=invoked,
                                   completed=time.monotonic(), outcome="fail", **fields)
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}"
            return None, Operation(client=self.client, invoked=invoked, completed=None,
                                   outcome="unknown", error=error[:200], **fields)
        return answer, Operation(client=self.client, invoked=invoked,
                                 completed=time.monotonic(), outcome="ok", **fields)


def _listed(info: tenure.LockInfo | None) -> dict[str, Any]:
    """What a read-write lock's inspect listed, as an Operation's answer fields: its leases'
    mode ("write" if a writer is among them) and fences (None if one is not kept)."""
    leases = () if info is None else info.leases
    if not leases:
        return {"held": False, "fences": ()}
    fences = tuple(lease.fence for lease in leases)
    mode = "write" if any(lease.mode == "write" for lease in leases) else "read"
    return {"held": True, "mode": mode,
            "fences": None if None in fences else fences}
