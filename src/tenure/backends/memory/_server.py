"""The in-process server behind ``memory://``: a table of records per kind under one mutex,
expiry by the clock given. Every step runs under the mutex, so each is atomic as the store
contract requires; every step takes the kind as data (``_records`` says what differs).

Fences and clean-up (DESIGN rule 10): a grant's fence is ``max(last fence + 1, the host's
wall clock in microseconds)``, so it still increases strictly per name, and a name whose
record was removed (idle for ``gc_after``, or a fresh server after a fork) starts again above
every fence it issued instead of at 1. Clean-up is amortized: every record is on one
min-heap by the earliest time it could be due (now + ``gc_after`` at a write; a record's
item is replaced only when a write makes it due sooner, e.g. a release before the lease's
end); each acquire first pops at most ``SWEEP_LIMIT`` items that are due, removes those
records that are still idle, and puts the others back at their real due time. An acquire
(the only step that creates records) therefore does bounded work, and records go at least as
fast as acquires create them; releases and renewals never sweep.
"""

from __future__ import annotations

import datetime
import heapq
import itertools
import math
import os
import threading
import time
from collections.abc import Callable

from tenure._errors import limit_mismatch
from tenure._types import Busy, Grant, Holder, Kind, LeaseSpec, LockInfo
from tenure._waiters import Waiters
from tenure.backends.memory._records import Lease, Place, Record, info

__all__ = ["SWEEP_LIMIT", "MemoryServer", "server_named", "wake_key", "wall_clock_us"]

SWEEP_LIMIT = 16
"""Heap items a write may pop to collect idle records: more than the one record a write can
create, so clean-up keeps up with any rate of new names, and small enough that no write pays
for a backlog."""


def wall_clock_us() -> int:
    """The host's wall clock in whole microseconds since the epoch: the floor of every fence.
    (Not the expiry clock: that one is monotonic and starts anywhere.)"""
    return time.time_ns() // 1000


def wake_key(kind: Kind, name: str) -> str:
    """The key a (kind, name)'s waiters wait under in ``MemoryServer.waiters``."""
    return kind + "\0" + name  # (a str: formatting the enum is slow on Python 3.11)


class MemoryServer:
    """``clock``: seconds on a monotonic clock, for expiry and clean-up. ``fence_floor``: the
    least fence a grant may take (default the wall clock in microseconds); a test may pass
    its own to follow the fences exactly."""

    def __init__(
        self,
        clock: Callable[[], float] = time.monotonic,
        fence_floor: Callable[[], int] = wall_clock_us,
    ) -> None:
        self.clock = clock
        self.fence_floor = fence_floor
        self.waiters = Waiters()
        self._mutex = threading.Lock()
        self._tables: dict[Kind, dict[str, Record]] = {kind: {} for kind in Kind}
        # (due, sequence, kind, name): the earliest a record could be removed; the sequence
        # keeps tuples from ever comparing further.
        self._due: list[tuple[float, int, Kind, str]] = []
        self._sequence = itertools.count()

    # ---- the steps ----------------------------------------------------------------------

    def acquire(
        self, name: str, spec: LeaseSpec, token: str, ttl: float, holder: Holder, *,
        gc_after: float | None, queue: bool = True,
    ) -> Grant | Busy:
        """``queue=False``: a refused queued attempt takes no place either (the store's quick
        try, whose refusal changes nothing)."""
        with self._mutex:
            now = self.clock()
            if self._due and self._due[0][0] <= now:  # (inline: most acquires have none due)
                self._collect(now)
            table = self._tables[spec.kind]
            record = table.get(name)
            if record is None:
                record = table[name] = Record()
            self._used(spec.kind, name, record, now, gc_after)
            leases = record.leases
            if leases or record.places:
                dropped = record.drop_expired(now)
                mine = leases.get(token)
                if mine is not None:  # a retry after a lost reply: same lease, same fence
                    mine.expires_at = now + ttl
                    return Grant(mine.fence)
                if leases and record.limit != spec.limit:
                    raise limit_mismatch(name, record.limit, spec.limit)
                grantable = record.grantable(token, spec)
            else:
                # An idle record, the uncontended acquire: nothing to drop, no lease of this
                # token, no stored limit, nobody ahead; the kind's rule over nothing.
                dropped = False
                grantable = spec.mode is not None or spec.weight <= spec.limit
            if grantable:
                if record.places:
                    record.places.pop(token, None)
                record.limit = spec.limit
                record.value = spec.value
                record.fence = max(record.fence + 1, self.fence_floor())
                leases[token] = Lease(
                    now + ttl, holder, datetime.datetime.now(datetime.UTC), record.fence,
                    spec.mode, spec.fair, spec.weight,
                )
                outcome: Grant | Busy = Grant(record.fence)
            else:
                if queue and spec.queues:
                    self._keep_place(record, token, spec, now, holder)
                ends = [lease.expires_at - now for lease in leases.values()]
                outcome = Busy(min(ends) if ends else None)
        if dropped:
            # A lapsed lease or place may have been all that held a waiter back.
            self.waiters.notify(wake_key(spec.kind, name))
        return outcome

    def release(self, kind: Kind, name: str, token: str, *, gc_after: float | None) -> bool:
        with self._mutex:
            record = self._tables[kind].get(name)
            if record is None:
                return False
            now = self.clock()
            lease = record.leases.pop(token, None)
            place = record.places.pop(token, None) if record.places else None
            if lease is None and place is None:
                return False
            self._used(kind, name, record, now, gc_after)
        self.waiters.notify(wake_key(kind, name))
        return lease is not None and lease.expires_at > now

    def extend(
        self, kind: Kind, name: str, token: str, ttl: float, *, gc_after: float | None
    ) -> bool:
        with self._mutex:
            now = self.clock()
            record = self._tables[kind].get(name)
            lease = None if record is None else record.live(token, now)
            if record is None or lease is None:
                return False
            lease.expires_at = now + ttl
            self._used(kind, name, record, now, gc_after)
            return True

    def owned(self, kind: Kind, name: str, token: str) -> bool:
        with self._mutex:
            record = self._tables[kind].get(name)
            return record is not None and record.live(token, self.clock()) is not None

    def set_value(self, name: str, token: str, value: str) -> bool:
        with self._mutex:
            record = self._tables[Kind.LOCK].get(name)
            if record is None or record.live(token, self.clock()) is None:
                return False
            record.value = value
            return True

    def inspect(self, kind: Kind, name: str) -> LockInfo | None:
        with self._mutex:
            record = self._tables[kind].get(name)
            return None if record is None else info(kind, name, record, self.clock())

    def list_records(self, kind: Kind, prefix: str) -> list[LockInfo]:
        with self._mutex:
            now = self.clock()
            return [
                info(kind, name, record, now)
                for name, record in sorted(self._tables[kind].items())
                if name.startswith(prefix)
            ]

    def break_leases(self, kind: Kind, name: str, *, gc_after: float | None) -> bool:
        with self._mutex:
            record = self._tables[kind].get(name)
            if record is None:
                return False
            now = self.clock()
            record.drop_expired(now)
            broken = bool(record.leases)
            record.leases.clear()
            if broken:
                self._used(kind, name, record, now, gc_after)
        if broken:
            self.waiters.notify(wake_key(kind, name))
        return broken

    def _keep_place(
        self, record: Record, token: str, spec: LeaseSpec, now: float, holder: Holder
    ) -> None:
        """Add a refused queued attempt's place at the tail (with who waits there, since
        when, and its mode or weight), or refresh the one it holds."""
        assert spec.queue_ttl is not None
        place = record.places.get(token)
        if place is None:
            record.arrivals += 1
            record.places[token] = Place(
                spec.mode, record.arrivals, now + spec.queue_ttl, holder,
                datetime.datetime.now(datetime.UTC), spec.fair, spec.weight,
            )
        else:
            place.expires_at = now + spec.queue_ttl

    # ---- clean-up -----------------------------------------------------------------------

    def _used(
        self, kind: Kind, name: str, record: Record, now: float, gc_after: float | None
    ) -> None:
        """Note a write to ``record``: it may be removed ``gc_after`` after its last lease or
        place ends, and no sooner than ``gc_after`` after now."""
        record.used_at = now
        record.gc_after = gc_after
        if gc_after is not None and now + gc_after < record.due:
            self._schedule(kind, name, record, now + gc_after)

    def _schedule(self, kind: Kind, name: str, record: Record, at: float) -> None:
        record.due = at
        record.ticket = next(self._sequence)
        heapq.heappush(self._due, (at, record.ticket, kind, name))

    def _collect(self, now: float) -> None:
        """Remove the records that are due, popping at most SWEEP_LIMIT heap items. A popped
        record that was used since it was scheduled goes back at its real due time, which is
        past every lease and place it holds, so a live one is never removed."""
        due = self._due
        for _ in range(SWEEP_LIMIT):
            if not due or due[0][0] > now:
                return
            _, ticket, kind, name = heapq.heappop(due)
            record = self._tables[kind].get(name)
            if record is None or record.ticket != ticket:
                continue  # a stale item: the record was rescheduled sooner, or removed
            if record.gc_after is None:  # last written by a connection that keeps records
                record.due, record.ticket = math.inf, -1
                continue
            at = record.ends_at() + record.gc_after
            if at <= now:
                del self._tables[kind][name]
            else:
                self._schedule(kind, name, record, at)


_servers: dict[str, MemoryServer] = {}
_servers_mutex = threading.Lock()


def server_named(name: str) -> MemoryServer:
    """The process-wide server called ``name`` (``memory://`` is "", ``memory://x`` is "x")."""
    with _servers_mutex:
        return _servers.setdefault(name, MemoryServer())


def _forget_after_fork() -> None:
    # One server per process: the child starts empty, holding nothing of its parent's.
    global _servers_mutex
    _servers.clear()
    _servers_mutex = threading.Lock()


os.register_at_fork(after_in_child=_forget_after_fork)
