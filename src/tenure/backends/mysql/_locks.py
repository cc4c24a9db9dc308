"""MySQL's plain locks (and elections: a lock whose lease carries a value), blocking steps for
both flavours; SQL in ``_sql``.

Waking waiters across processes and hosts: the release gate. MySQL has no LISTEN/NOTIFY; the
one thing a session can block on and another session can end is a user-level lock
(``GET_LOCK``), and only the session holding it can give it back. So the holder's own session
holds it: the grant takes the name's gate inside its own statement (``Statements.acquire_gated``:
no second statement or result set), and that connection is kept aside (out of the pool)
until the release, which frees the row and the gate in one statement on it. A refused
acquire learns in a second round trip whether the gate is held; its waiter then blocks in
``GET_LOCK`` on the gate (taking it and giving it back in one statement) until a release
opens it, the holder's session ends (a crash, a lost connection), or its back-off pause
passes. Why this shape:

- No lost wake-up: the gate is a level, not an edge. A release between the refusal and the
  wait leaves the gate open, and the wait returns at once.
- The lease row stays the truth: a wake-up only makes the waiter try again; a spurious one
  (a holder whose connection dropped, a gate shared by a hash collision) costs one attempt.
- A gate that is missing (the holder could not take it: too many gates held in its process,
  a stale holder still had it) is seen at the refusal, and that waiter falls back to short
  back-off pauses instead of spinning on an open gate.
- Bounded by the holder's lease: each wait is one back-off pause, at most the holder's
  remaining lease, so an expiry without a release is noticed as before.
- Waiters hold nothing: they never delay a holder's release, and the holder's ``GET_LOCK``
  waits at most ``HOLD_WAIT`` for a waiter passing through.
- Locks only: a semaphore's permits and a read-write lock's leases have many holders, and a
  turn in a queue comes by more than one session's release, so their waiters back off
  (``FALLBACK_PAUSE``) across processes.
- Fork-safe: a child abandons the parent's gate connections untouched (closing them would end
  the parent's sessions and open its gates) and takes gates on connections of its own.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import os
from collections.abc import Callable, Sequence
from typing import Any

from tenure._errors import StoreFault
from tenure._types import Busy, Grant, Holder, Kind, LockInfo, Renewal
from tenure._waiters import Waiters
from tenure.backends._sql_common import clip, has_pending_input
from tenure.backends.mysql._connection import (
    Connection,
    Cursor,
    Pool,
    close_quietly,
    execute,
    hexed,
    micros,
    prefix_params,
)
from tenure.backends.mysql._errors import DRIVER_ERRORS
from tenure.backends.mysql._records import Row, records
from tenure.backends.mysql._sql import GATE_RELEASE, GATE_TAKE, GATE_WAIT, Statements

__all__ = ["FALLBACK_PAUSE", "HOLD_WAIT", "GateWait", "Locks"]

HOLD_WAIT = 0.05
"""How long a grant's ``GET_LOCK`` of the gate may wait for a waiter passing through it (one
statement's worth). MariaDB honours fractions; MySQL takes whole seconds and rounds this to 0:
there a rare collision leaves that lease without a gate, and its waiters on back-off."""
FALLBACK_PAUSE = 0.05
"""Longest pause of a waiter whose holder holds no gate (the back-off of old)."""


class GateWait:
    """A waiting attempt's word for its wait, kept by the attempt: the gate its last refusal
    said to block on, or None when nobody held it (no release will open it: back off)."""

    __slots__ = ("gate",)

    def __init__(self) -> None:
        self.gate: str | None = None


class Locks:
    """The lock steps on one table."""

    def __init__(
        self, pool: Pool, sql: Statements, waiters: Waiters, gate_prefix: str,
        collect_if_due: Callable[[], None],
    ) -> None:
        self.pool = pool
        self.sql = sql
        self.waiters = waiters
        self._gate_prefix = gate_prefix
        self._collect_if_due = collect_if_due

    def _gate(self, name: str) -> str:
        # User-level lock names are at most 64 characters: a digest of database, table and
        # name (a collision would only share wake-ups between two names).
        digest = hashlib.sha256((self._gate_prefix + name).encode("utf-8", "surrogatepass"))
        return "tenure:" + digest.hexdigest()[:48]

    def acquire(
        self, name: str, token: str, ttl: float, holder: Holder, *, value: str | None,
        wait: GateWait | None,
    ) -> Grant | Busy:
        """``value``: an election's value, stored with the lease it grants (``None``: a
        plain lock, whose statement leaves the value columns alone). ``wait``: the waiting
        attempt's, told by a refusal which gate to block on."""
        gate = self._gate(name)
        self.pool.check_fork()  # a forked child must not take the parent's mutex
        with self.pool.mutex:
            # A name whose gate a connection here holds already takes none (a retry of this
            # acquire; or an earlier lease of the name, over if this one is granted: its gate
            # then passes to this lease below). Past the limit of connections kept aside, a
            # grant takes none either (its waiters back off).
            take_gate = name not in self.pool.gates and len(self.pool.gates) < max(
                1, self.pool.options.pool_size
            )
        params = {
            "name": hexed(name), "token": token, "ttl_us": micros(ttl),
            "host": clip(holder.host), "pid": holder.pid, "thread": clip(holder.thread),
            "gate": gate, "hold_wait": HOLD_WAIT, "value": value,
        }
        if value is None:
            statement = self.sql.acquire_gated if take_gate else self.sql.acquire
        else:
            statement = self.sql.acquire_value_gated if take_gate else self.sql.acquire_value

        def attempt(cursor: Cursor) -> tuple[Grant | Busy, bool]:
            affected = execute(cursor, statement, params)
            fence = int(cursor.lastrowid)
            if fence:
                if not take_gate or affected == 2:
                    # 2: granted on an existing row, whose update ran GET_LOCK (``_sql``).
                    return Grant(fence), take_gate
                # A new row (the name's first lease here): its gate in a second round trip.
                cursor.execute(GATE_TAKE, params)
                (taken,) = cursor.fetchone()
                return Grant(fence), taken == 1
            # Refused: a second round trip, on the contended path only, for the wait.
            cursor.execute(self.sql.refusal, params)
            left_us, gate_held = cursor.fetchone()
            left = None if left_us is None else max(0.0, int(left_us) / 1e6)
            if wait is not None:
                wait.gate = gate if gate_held else None
            return Busy(left), False

        connection = self.pool.checkout()
        outcome, gated = self.pool.run(attempt, connection, keep=lambda result: result[1])
        if isinstance(outcome, Grant):
            replaced = None
            with self.pool.mutex:
                pinned = gated and not self.pool.closed and self.pool.pid == os.getpid()
                if pinned:
                    replaced = self.pool.gates.get(name)
                    self.pool.gates[name] = (token, connection)
                elif not gated and name in self.pool.gates:
                    # The server granted this lease, so the earlier one (expired, or its
                    # acquire undone) is over: its gate now serves this one.
                    self.pool.gates[name] = (token, self.pool.gates[name][1])
            if gated and not pinned:
                close_quietly(connection)
            if replaced is not None:
                close_quietly(replaced[1])  # cannot hold the gate this session just took
            self._collect_if_due()
        return outcome

    def _take_gate_connection(self, name: str, token: str) -> Connection | None:
        """The connection holding the gate of this lease, taken out of the gate table; None
        if there is none or it died while set aside (its gate is open already)."""
        self.pool.check_fork()
        with self.pool.mutex:
            entry = self.pool.gates.get(name)
            if self.pool.pid != os.getpid() or entry is None or entry[0] != token:
                return None
            del self.pool.gates[name]
            connection = entry[1]
        if not connection.open or has_pending_input(connection._sock.fileno()):
            close_quietly(connection)
            return None
        return connection

    def _drop_gate(self, name: str, token: str) -> None:
        """The lease is gone without a release (expired, broken, taken over): open its gate,
        so nobody blocks on it, and put its connection back in the pool."""
        connection = self._take_gate_connection(name, token)
        if connection is not None:
            gate = {"gate": self._gate(name)}
            # A failure closes the connection, which opens the gate just as well.
            with contextlib.suppress(StoreFault, *DRIVER_ERRORS):
                self.pool.run(lambda cursor: cursor.execute(GATE_RELEASE, gate), connection)

    def gate_wait_seconds(self, timeout: float) -> float | None:
        """The ``GET_LOCK`` timeout for a wait of ``timeout`` seconds; None if a gate wait
        cannot serve it (statements must answer well within the ``timeout`` option)."""
        if self.pool.mariadb is False:
            # MySQL's GET_LOCK takes whole seconds: a pause under one rounds up, so a holder
            # whose lease expires without a release is noticed up to 1 s late there.
            wait: float = max(1, math.ceil(timeout))
        else:
            wait = round(max(timeout, 0.0), 6)
        if wait <= 0 or wait > self.pool.options.timeout - 0.5:
            return None
        return wait

    def wait_gate(self, gate: str, wait: float) -> bool:
        """Block until ``gate`` opens (a release, or its holder's session ended) or ``wait``
        seconds (from ``gate_wait_seconds``) pass; the gate is held for no time at all.

        False at once, without waiting, when this process has ``pool_size`` gate waits in
        flight already (each blocks a connection and a thread): wait by back-off instead.
        """
        self.pool.check_fork()
        with self.pool.mutex:
            if self.pool.gate_waits >= max(1, self.pool.options.pool_size):
                return False
            self.pool.gate_waits += 1
        try:
            self.pool.run(lambda cursor: cursor.execute(GATE_WAIT, {"gate": gate, "wait": wait}))
        finally:
            with self.pool.mutex:
                self.pool.gate_waits = max(0, self.pool.gate_waits - 1)
        return True

    def release(self, name: str, token: str) -> bool:
        params = {"name": hexed(name), "token": token}
        connection = self._take_gate_connection(name, token)
        if connection is None:
            released = self.pool.run(lambda cursor: execute(cursor, self.sql.release, params) == 1)
        else:
            # The row and the gate in one statement on the session holding the gate.
            gated = {**params, "gate": self._gate(name)}

            def release_gated(cursor: Cursor) -> bool:
                if execute(cursor, self.sql.release_gated, gated) == 1:
                    return True  # the statement gave the gate back
                cursor.execute(GATE_RELEASE, gated)
                return False

            released = self.pool.run(release_gated, connection)
        if released:
            self.waiters.notify(name)
        self._collect_if_due()
        return released

    def extend_many(self, renewals: Sequence[Renewal]) -> list[bool]:
        if not renewals:
            return []
        results = self.pool.extend_each(self.sql.extend, renewals)
        for renewal, extended in zip(renewals, results, strict=True):
            if not extended:
                self._drop_gate(renewal.name, renewal.token)
        return results

    def set_value(self, name: str, token: str, value: str) -> bool:
        params = {"name": hexed(name), "token": token, "value": value}
        return self.pool.run(lambda cursor: execute(cursor, self.sql.set_value, params) == 1)

    def owned(self, name: str, token: str) -> bool:
        params = {"name": hexed(name), "token": token}
        return self.pool.run(lambda cursor: int(cursor.execute(self.sql.owned, params)) == 1)

    def inspect(self, name: str) -> LockInfo | None:
        def read(cursor: Cursor) -> tuple[Any, ...] | None:
            cursor.execute(self.sql.inspect, {"name": hexed(name)})
            row: tuple[Any, ...] | None = cursor.fetchone()
            return row

        row = self.pool.run(read)
        return None if row is None else _lock_records([row])[0]

    def list_records(self, prefix: str) -> list[LockInfo]:
        params = prefix_params(prefix)
        if params is None:
            return []
        return _lock_records(self.pool.rows(self.sql.list_locks, params))

    def break_leases(self, name: str) -> bool:
        params = {"name": hexed(name)}
        broken = self.pool.run(lambda cursor: execute(cursor, self.sql.breaking, params) == 1)
        if broken:
            self.waiters.notify(name)
        return broken


def _lock_records(rows: Sequence[tuple[Any, ...]]) -> list[LockInfo]:
    shaped: list[Row] = []
    for name, fence, live, host, pid, thread, acquired_at, left_us, value in rows:
        lease = (host, pid, thread, acquired_at, left_us, None, None) if live else None
        shaped.append((name, fence, None, 0, value, lease))
    return records(Kind.LOCK, shaped)
