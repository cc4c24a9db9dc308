"""The blocking store behind ``mysql://``, shared by both flavours (asyncio runs its calls in
worker threads): the narrow verbs, the kind as data, dispatched to each kind's steps
(``_locks``, ``_permits``, ``_queues``) on one pool of connections (``_connection``).

Connections come from a small pool of idle ones, all in autocommit: each lock operation is
one statement (see ``_sql``), a semaphore's or read-write lock's acquire one short
transaction sent as one text (see ``_semaphore_sql``, ``_rwlock_sql``), so a lock never
depends on a transaction staying open or on which connection runs the next statement. A
connection that failed is closed, never reused; an idle one the server closed meanwhile (a
restart) is noticed and dropped before use.

Waking waiters across processes and hosts: the release gate (see ``_locks``).

Clean-up of idle records (``gc_after``, DESIGN rule 10): a grant or a release that finds the
last clean-up pass of this store more than ``SWEEP_INTERVAL`` (or ``gc_after``, if shorter)
ago runs one pass after its own statement: one text per table in use, one round trip each,
each a range of at most ``SWEEP_BATCH`` rows of the primary key, resumed where the last pass
ended (see the ``collect`` statements). So the uncontended cycle pays it about once a
minute, never per operation; the work per pass is bounded whatever the table's size; every
client that uses the tables shares the sweep; no thread of its own. A pass that fails is
skipped (the operation it follows has succeeded already); the next is due an interval later.
"""


from __future__ import annotations

import contextlib
import threading
import time
from typing import Any

from tenure._errors import StoreFault
from tenure._options import DEFAULT_GC_AFTER
from tenure._types import Busy, Grant, Holder, Kind, LeaseSpec
from tenure._waiters import Waiters
from tenure.backends._by_kind import ByKind
from tenure.backends._sql_common import SqlOptions
from tenure.backends.mysql._connection import (
    Cursor,
    Pool,
    micros,
    run_batch,
    run_transaction,
    table_exists,
)
from tenure.backends.mysql._errors import DRIVER_ERRORS
from tenure.backends.mysql._locks import GateWait, Locks
from tenure.backends.mysql._permits import Permits
from tenure.backends.mysql._queues import Queues
from tenure.backends.mysql._sql import Statements

__all__ = ["MySQLTable"]

SWEEP_INTERVAL = 60.0
"""Seconds between two clean-up passes of one store (at most; ``gc_after`` if shorter)."""
SWEEP_BATCH = 500
"""Rows of the primary key one clean-up pass reads per table."""
LONGEST_GC_US = 3_000_000_000 * 1_000_000
"""``gc_after`` in microseconds is capped near 95 years: the server's DATETIME arithmetic
would leave its range (and compare as NULL) beyond some thousands of years."""

_waiters_by_table: dict[str, Waiters] = {}
_waiters_mutex = threading.Lock()


class MySQLTable(ByKind):
    """One lock table on one server: leases of every kind, each verb blocking (see
    ``BlockingStore``). Thread-safe."""

    locks: Locks
    permits: Permits
    queues: Queues

    def __init__(
        self, connect_args: dict[str, Any], options: SqlOptions, display: str,
        gc_after: float | None = DEFAULT_GC_AFTER,
    ) -> None:
        self.options = options
        self.display = display
        self.gc_after = gc_after
        """Seconds an idle name's records are kept (None: forever); see ``collect_if_due``."""
        self.sql = Statements(options.table)
        self.pool = Pool(connect_args, options, display, self.sql)
        # Waiters on the same table in this process wake at once on a release from here,
        # whichever client (of the same server, database and table) they use.
        server = connect_args.get("unix_socket") or (
            f"{connect_args.get('host')}:{connect_args.get('port')}"
        )
        key = f"{server}/{connect_args.get('database')}/{options.table}"
        with _waiters_mutex:
            self.waiters = _waiters_by_table.setdefault(key, Waiters())
        gate_prefix = f"{connect_args.get('database')}/{options.table}/"
        self.locks = Locks(self.pool, self.sql, self.waiters, gate_prefix, self.collect_if_due)
        self.permits = Permits(self.pool, self.sql, self.waiters, self.collect_if_due)
        self.queues = Queues(self.pool, self.sql, self.waiters, self.collect_if_due)
        self._sweep_due = 0.0
        """``time.monotonic()`` from which the next clean-up pass may run: the first grant or
        release runs one (a short-lived process would otherwise never sweep)."""
        self._sweep_after = {"locks": "", "permits": "", "rwlocks": ""}
        """Per table: hex of the name where the last pass ended ('' = from the start)."""

    def close(self) -> None:
        self.pool.close()

    # ---- the verbs, the kind as data -------------------------------------------------------

    def acquire(
        self, name: str, spec: LeaseSpec, token: str, ttl: float, holder: Holder, *,
        wait: GateWait | None = None,
    ) -> Grant | Busy:
        """``wait``: a lock's waiting attempt's, told by each refusal which gate to block on
        (see ``_locks``)."""
        if spec.kind is Kind.SEMAPHORE:
            return self.permits.acquire(name, token, ttl, holder, spec.limit,
                                        weight=spec.weight, queue_ttl=spec.queue_ttl)
        if spec.kind is Kind.RWLOCK:
            assert spec.mode is not None and spec.queue_ttl is not None
            return self.queues.acquire(name, token, ttl, holder, mode=spec.mode.value,
                                       queue_ttl=spec.queue_ttl, fair=spec.fair)
        return self.locks.acquire(name, token, ttl, holder, value=spec.value, wait=wait)

    def set_value(self, name: str, token: str, value: str) -> bool:
        return self.locks.set_value(name, token, value)

    # ---- clean-up of idle records (``gc_after``) -------------------------------------

    def collect_if_due(self) -> None:
        """Run one clean-up pass if the last one is an interval old (see the module
        docstring); called after a grant or a release, never before its statement."""
        if self.gc_after is None:
            return
        self.pool.check_fork()
        now = time.monotonic()
        with self.pool.mutex:
            if now < self._sweep_due or self.pool.closed:
                return
            self._sweep_due = now + min(SWEEP_INTERVAL, self.gc_after)
        # The operation this follows has succeeded: a failed pass is only skipped.
        with contextlib.suppress(StoreFault, *DRIVER_ERRORS):
            self.pool.run(self._collect)

    def _collect(self, cursor: Cursor) -> None:
        gc_us = min(micros(self.gc_after or 0.0), LONGEST_GC_US)
        # The semaphore and read-write tables exist once any client used them: a client that
        # never does still sweeps them (looking for them again each pass until they exist).
        pool = self.pool
        ready = pool.ready_kinds
        for optional in (self.permits, self.queues):
            if not ready.get(optional.kind):
                ready[optional.kind] = table_exists(cursor, self.sql, optional.table_name())
        passes = [("locks", self.sql.collect, run_batch)]
        if ready.get(Kind.SEMAPHORE):
            passes.append(("permits", self.permits.sql.collect, run_transaction))
        if ready.get(Kind.RWLOCK):
            passes.append(("rwlocks", self.queues.sql.collect, run_transaction))
        for table, statement, run in passes:
            params = {"after": self._sweep_after[table], "batch": SWEEP_BATCH, "gc_us": gc_us}
            end, _ = run(cursor, statement, params)
            with pool.mutex:
                self._sweep_after[table] = "" if end is None else str(end).lower()
