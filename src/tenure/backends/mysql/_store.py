"""The blocking PyMySQL calls behind ``mysql://``, shared by both flavours (asyncio runs them
in worker threads).

Connections come from a small pool of idle ones, all in autocommit: each lock operation is
one statement (see ``_sql`` and ``_semaphore_sql``), a read-write lock's acquire one short
transaction sent as one text (see ``_rwlock_sql``), so a lock never depends on a transaction
staying open or on which connection runs the next statement. A connection that failed is
closed, never reused; an idle one the server closed meanwhile (a restart) is noticed and
dropped before use.

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
import dataclasses
import datetime
import hashlib
import math
import os
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

# PyMySQL ships no type information (types-PyMySQL is a separate stub package): its objects
# are typed Any here, and the few values we take out of them are converted explicitly.
import pymysql  # type: ignore[import-untyped]
import pymysql.cursors  # type: ignore[import-untyped]
from pymysql.constants import CLIENT  # type: ignore[import-untyped]

from tenure._errors import BackendError, ConfigurationError, limit_mismatch
from tenure._options import DEFAULT_GC_AFTER
from tenure._types import Busy, Grant, Holder, LeaseInfo, LockInfo, Renewal
from tenure._waiters import Waiters, permit_key, queue_key
from tenure.backends._sql_common import (
    SCHEMA_VERSION,
    SqlOptions,
    abandon,
    clip,
    has_pending_input,
    parse_schema_mark,
)
from tenure.backends.mysql._rwlock_sql import RwlockStatements
from tenure.backends.mysql._semaphore_sql import (
    GRANTED,
    MINE,
    MISMATCH,
    SemaphoreStatements,
)
from tenure.backends.mysql._sql import (
    GATE_RELEASE,
    GATE_TAKE,
    GATE_WAIT,
    SESSION_SETUP,
    SQL_MODE,
    Statements,
)

__all__ = ["MySQLStore"]

T = TypeVar("T")
Connection = Any
"""A ``pymysql.connections.Connection``."""
Cursor = Any
"""A ``pymysql.cursors.Cursor``."""

ER_LOCK_DEADLOCK = 1213
ER_NO_SUCH_TABLE = 1146
ER_BAD_FIELD_ERROR = 1054
ER_DUP_FIELDNAME = 1060
DEADLOCK_RETRIES = 5
HOLD_WAIT = 0.05
"""How long a grant's ``GET_LOCK`` of the gate may wait for a waiter passing through it (one
statement's worth). MariaDB honours fractions; MySQL takes whole seconds and rounds this to 0:
there a rare collision leaves that lease without a gate, and its waiters on back-off."""
FALLBACK_PAUSE = 0.05
"""Longest pause of a waiter whose holder holds no gate (the back-off of old)."""
SWEEP_INTERVAL = 60.0
"""Seconds between two clean-up passes of one store (at most; ``gc_after`` if shorter)."""
SWEEP_BATCH = 500
"""Rows of the primary key one clean-up pass reads per table."""
LONGEST_GC_US = 3_000_000_000 * 1_000_000
"""``gc_after`` in microseconds is capped near 95 years: the server's DATETIME arithmetic
would leave its range (and compare as NULL) beyond some thousands of years."""


@dataclasses.dataclass(frozen=True)
class GateWait:
    """A refused acquire's word for its wait (``Busy.waiting``): the gate to block on, or
    None when nobody held it (no release will open it: wait by back-off)."""

    gate: str | None

_waiters_by_table: dict[str, Waiters] = {}
_waiters_mutex = threading.Lock()


class MySQLStore:
    """One lock table on one server. Thread-safe."""

    def __init__(
        self, connect_args: dict[str, Any], options: SqlOptions, display: str,
        gc_after: float | None = DEFAULT_GC_AFTER,
    ) -> None:
        self.options = options
        self.display = display
        self.gc_after = gc_after
        """Seconds an idle name's records are kept (None: forever); see ``collect_if_due``."""
        self._connect_args = {
            **connect_args,
            "charset": "utf8mb4",
            "autocommit": True,
            # Affected rows = rows matched, so an UPDATE whose new values equal the old ones
            # still reports its match (extend); the acquire does not rely on counts at all.
            # MULTI_STATEMENTS: the lock and semaphore statements no longer need it (each is
            # one statement, the gate inside it); kept for statement texts sent together
            # elsewhere. Every value is a bound parameter escaped by PyMySQL, names travel
            # only as hex digits.
            "client_flag": CLIENT.FOUND_ROWS | CLIENT.MULTI_STATEMENTS,
            "connect_timeout": options.timeout,
            "read_timeout": options.timeout,
            "write_timeout": options.timeout,
            "sql_mode": SQL_MODE,
            # InnoDB counts lock waits in whole seconds; our statements hold row locks for
            # microseconds, so a wait this long means a stuck foreign transaction.
            "init_command": (
                f"SET time_zone = '+00:00', "
                f"innodb_lock_wait_timeout = {max(1, math.ceil(options.timeout))}"
            ),
            "program_name": "tenure",
        }
        self.sql = Statements(options.table)
        self.semaphores = SemaphoreStatements(options.table)
        self.rwlocks = RwlockStatements(options.table)
        # Waiters on the same table in this process wake at once on a release from here,
        # whichever client (of the same server, database and table) they use.
        server = connect_args.get("unix_socket") or (
            f"{connect_args.get('host')}:{connect_args.get('port')}"
        )
        key = f"{server}/{connect_args.get('database')}/{options.table}"
        with _waiters_mutex:
            self.waiters = _waiters_by_table.setdefault(key, Waiters())
        self._mutex = threading.Lock()
        self._idle: list[Connection] = []
        self._gate_prefix = f"{connect_args.get('database')}/{options.table}/"
        self._gates: dict[str, tuple[str, Connection]] = {}
        """name -> (token of the lease it serves, the connection whose session holds the
        name's gate). One per name: the server grants a name to one lease at a time."""
        self._gate_waits = 0
        self._mariadb: bool | None = None
        self._pid = os.getpid()
        self._ready = False
        self._permits_ready = False
        self._rwlocks_ready = False
        self._closed = False
        self._sweep_due = 0.0
        """``time.monotonic()`` from which the next clean-up pass may run: the first grant or
        release runs one (a short-lived process would otherwise never sweep)."""
        self._sweep_after = {"locks": "", "permits": "", "rwlocks": ""}
        """Per table: hex of the name where the last pass ended ('' = from the start)."""

    # ---- connections -------------------------------------------------------------------

    def _connect(self) -> Connection:
        try:
            connection: Connection = pymysql.connect(
                **self._connect_args
            )
        except pymysql.err.MySQLError as exc:
            raise BackendError(f"MySQL {self.display}: cannot connect: {exc}") from exc
        try:
            with connection.cursor() as cursor:
                cursor.execute(SESSION_SETUP)
        except pymysql.err.MySQLError as exc:
            _close_quietly(connection)
            raise BackendError(f"MySQL {self.display}: {exc}") from exc
        return connection

    def _checkout(self) -> Connection:
        self._check_fork()
        while True:
            with self._mutex:
                connection = self._idle.pop() if self._idle else None
            if connection is None:
                return self._connect()
            if not connection.open or has_pending_input(connection._sock.fileno()):
                _close_quietly(connection)  # the server closed it while idle
                continue
            return connection

    def _check_fork(self) -> None:
        if self._pid != os.getpid():
            # A forked child: the parent's connections and mutex are not ours to touch.
            self._mutex = threading.Lock()
            abandon(self._idle)
            abandon(connection for _, connection in self._gates.values())
            self._idle = []
            self._gates = {}
            self._gate_waits = 0
            self._pid = os.getpid()

    def _checkin(self, connection: Connection) -> None:
        with self._mutex:
            keep = (
                not self._closed
                and self._pid == os.getpid()
                and len(self._idle) < self.options.pool_size
            )
            if keep:
                self._idle.append(connection)
        if not keep:
            _close_quietly(connection)

    def close(self) -> None:
        with self._mutex:
            self._closed = True
            idle, self._idle = self._idle, []
            # Ending the sessions opens their gates.
            idle.extend(connection for _, connection in self._gates.values())
            self._gates = {}
        if self._pid == os.getpid():
            for connection in idle:
                _close_quietly(connection)
        else:
            abandon(idle)

    def _extend_each(self, statement: str, renewals: Sequence[Renewal]) -> list[bool]:
        """Renew each lease with ``statement`` (a lock's, a permit's or a read-write lease's
        extend): one connection, one autocommit statement per lease, each atomic on its own
        (a batch in one transaction would only hold the first rows' locks for longer)."""

        def extend_all(cursor: Cursor) -> list[bool]:
            return [
                _execute(cursor, statement, {
                    "name": _hex(r.name), "token": r.token, "ttl_us": _micros(r.ttl),
                }) == 1
                for r in renewals
            ]

        return self._run(extend_all)

    def _rows(self, statement: str, params: dict[str, Any]) -> tuple[tuple[Any, ...], ...]:
        """Every row ``statement`` reads (an inspect or a listing)."""

        def read(cursor: Cursor) -> tuple[tuple[Any, ...], ...]:
            cursor.execute(statement, params)
            rows: tuple[tuple[Any, ...], ...] = cursor.fetchall()
            return rows

        return self._run(read)

    def _run(
        self, work: Callable[[Cursor], T], connection: Connection | None = None,
        *, keep: Callable[[T], bool] = lambda _: False,
    ) -> T:
        """Run ``work`` on a pooled connection (or the given one, a gate's), then return the
        connection to the pool unless ``keep(result)`` says it now holds a gate."""
        if self._closed:
            if connection is not None:
                _close_quietly(connection)
            raise BackendError(f"MySQL {self.display}: the client is closed")
        if connection is None:
            connection = self._checkout()
        try:
            if not self._ready:
                self._prepare(connection)
                self._ready = True
            with connection.cursor() as cursor:
                result = work(cursor)
        except BaseException as exc:
            _close_quietly(connection)
            if isinstance(exc, pymysql.err.MySQLError):
                if exc.args and exc.args[0] in (ER_NO_SUCH_TABLE, ER_BAD_FIELD_ERROR):
                    # Dropped behind our back (or made again by a tenure from before the
                    # value columns): look for, create and upgrade the tables again.
                    self._ready = self._permits_ready = self._rwlocks_ready = False
                raise BackendError(f"MySQL {self.display}: {exc}") from exc
            raise
        if not keep(result):
            self._checkin(connection)
        return result

    def _prepare(self, connection: Connection) -> None:
        """Create the table on first use, check its schema version, and add the election
        value columns to a table from before them."""
        with connection.cursor() as cursor:
            cursor.execute(self.sql.schema, {"table": self.sql.table})
            row = cursor.fetchone()
            if row is None:
                cursor.execute(self.sql.create)
                cursor.execute(self.sql.schema, {"table": self.sql.table})
                row = cursor.fetchone()
            cursor.execute("SELECT VERSION()")
            (version_text,) = cursor.fetchone()
            self._mariadb = "mariadb" in str(version_text).lower()
        comment = None if row is None else row[0]
        self._check_version(comment)
        with connection.cursor() as cursor:
            cursor.execute(self.sql.value_columns, {"table": self.sql.table})
            (present,) = cursor.fetchone()
            if int(present) < 2:
                # An ALTER waiting for the table's metadata lock (a long transaction of
                # someone else's on it) would queue every later statement on the table
                # behind it: it gives up after the statement timeout instead, and the next
                # operation tries again.
                cursor.execute(
                    "SET SESSION lock_wait_timeout = %s", (max(1, math.ceil(self.options.timeout)),)
                )
                try:
                    cursor.execute(self.sql.add_value_columns)
                except pymysql.err.MySQLError as exc:
                    # Another process added them between our look and our ALTER: done.
                    if exc.args[0] != ER_DUP_FIELDNAME:
                        raise BackendError(
                            f"MySQL {self.display}: cannot add the election value columns "
                            f"to table {self.sql.table!r} (this needs the ALTER privilege "
                            f"once; see the docs on leader elections): {exc}"
                        ) from exc

    def _check_version(self, comment: str | None) -> None:
        version = parse_schema_mark(comment)
        if version is None:
            raise ConfigurationError(
                f"table {self.sql.table!r} exists but is not a tenure lock table (its comment "
                f"carries no schema mark); choose another table name with the 'table' option"
            )
        if version > SCHEMA_VERSION:
            raise ConfigurationError(
                f"table {self.sql.table!r} has tenure schema {version}, newer than this "
                f"tenure's {SCHEMA_VERSION}: upgrade tenure"
            )

    # ---- clean-up of idle records (``gc_after``) -------------------------------------

    def collect_if_due(self) -> None:
        """Run one clean-up pass if the last one is an interval old (see the module
        docstring); called after a grant or a release, never before its statement."""
        if self.gc_after is None:
            return
        self._check_fork()
        now = time.monotonic()
        with self._mutex:
            if now < self._sweep_due or self._closed:
                return
            self._sweep_due = now + min(SWEEP_INTERVAL, self.gc_after)
        # The operation this follows has succeeded: a failed pass is only skipped.
        with contextlib.suppress(BackendError):
            self._run(self._collect)

    def _collect(self, cursor: Cursor) -> None:
        gc_us = min(_micros(self.gc_after or 0.0), LONGEST_GC_US)
        # The semaphore and read-write tables exist once any client used them: a client that
        # never does still sweeps them (looking for them again each pass until they exist).
        if not self._permits_ready:
            self._permits_ready = _table_exists(cursor, self.sql, self.semaphores.quoted)
        if not self._rwlocks_ready:
            self._rwlocks_ready = _table_exists(cursor, self.sql, self.rwlocks.entries_name)
        passes = [("locks", self.sql.collect, _run_batch)]
        if self._permits_ready:
            passes.append(("permits", self.semaphores.collect, _run_transaction))
        if self._rwlocks_ready:
            passes.append(("rwlocks", self.rwlocks.collect, _run_transaction))
        for table, statement, run in passes:
            params = {"after": self._sweep_after[table], "batch": SWEEP_BATCH, "gc_us": gc_us}
            end, _ = run(cursor, statement, params)
            with self._mutex:
                self._sweep_after[table] = "" if end is None else str(end).lower()

    # ---- the atomic steps ----------------------------------------------------------------

    def _gate(self, name: str) -> str:
        # User-level lock names are at most 64 characters: a digest of database, table and
        # name (a collision would only share wake-ups between two names).
        digest = hashlib.sha256((self._gate_prefix + name).encode("utf-8", "surrogatepass"))
        return "tenure:" + digest.hexdigest()[:48]

    def acquire(
        self, name: str, token: str, ttl: float, holder: Holder, value: str | None = None
    ) -> Grant | Busy:
        """``value``: an election's value, stored with the lease it grants (``None``: a
        plain lock, whose statement leaves the value columns alone)."""
        gate = self._gate(name)
        self._check_fork()  # a forked child must not take the parent's mutex
        with self._mutex:
            # A name whose gate a connection here holds already takes none (a retry of this
            # acquire; or an earlier lease of the name, over if this one is granted: its gate
            # then passes to this lease below). Past the limit of connections kept aside, a
            # grant takes none either (its waiters back off).
            take_gate = name not in self._gates and len(self._gates) < max(
                1, self.options.pool_size
            )
        params = {
            "name": _hex(name), "token": token, "ttl_us": _micros(ttl),
            "host": clip(holder.host), "pid": holder.pid, "thread": clip(holder.thread),
            "gate": gate, "hold_wait": HOLD_WAIT, "value": value,
        }
        if value is None:
            statement = self.sql.acquire_gated if take_gate else self.sql.acquire
        else:
            statement = self.sql.acquire_value_gated if take_gate else self.sql.acquire_value

        def attempt(cursor: Cursor) -> tuple[Grant | Busy, bool]:
            affected = _execute(cursor, statement, params)
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
            return Busy(left, GateWait(gate if gate_held else None)), False

        connection = self._checkout_open()
        outcome, gated = self._run(attempt, connection, keep=lambda result: result[1])
        if isinstance(outcome, Grant):
            replaced = None
            with self._mutex:
                pinned = gated and not self._closed and self._pid == os.getpid()
                if pinned:
                    replaced = self._gates.get(name)
                    self._gates[name] = (token, connection)
                elif not gated and name in self._gates:
                    # The server granted this lease, so the earlier one (expired, or its
                    # acquire undone) is over: its gate now serves this one.
                    self._gates[name] = (token, self._gates[name][1])
            if gated and not pinned:
                _close_quietly(connection)
            if replaced is not None:
                _close_quietly(replaced[1])  # cannot hold the gate this session just took
            self.collect_if_due()
        return outcome

    def _checkout_open(self) -> Connection:
        if self._closed:
            raise BackendError(f"MySQL {self.display}: the client is closed")
        return self._checkout()

    def _take_gate_connection(self, name: str, token: str) -> Connection | None:
        """The connection holding the gate of this lease, taken out of the gate table; None
        if there is none or it died while set aside (its gate is open already)."""
        self._check_fork()
        with self._mutex:
            entry = self._gates.get(name)
            if self._pid != os.getpid() or entry is None or entry[0] != token:
                return None
            del self._gates[name]
            connection = entry[1]
        if not connection.open or has_pending_input(connection._sock.fileno()):
            _close_quietly(connection)
            return None
        return connection

    def _drop_gate(self, name: str, token: str) -> None:
        """The lease is gone without a release (expired, broken, taken over): open its gate,
        so nobody blocks on it, and put its connection back in the pool."""
        connection = self._take_gate_connection(name, token)
        if connection is not None:
            gate = {"gate": self._gate(name)}
            # A failure closes the connection, which opens the gate just as well.
            with contextlib.suppress(BackendError):
                self._run(lambda cursor: cursor.execute(GATE_RELEASE, gate), connection)

    def gate_wait_seconds(self, timeout: float) -> float | None:
        """The ``GET_LOCK`` timeout for a wait of ``timeout`` seconds; None if a gate wait
        cannot serve it (statements must answer well within the ``timeout`` option)."""
        if self._mariadb is False:
            # MySQL's GET_LOCK takes whole seconds: a pause under one rounds up, so a holder
            # whose lease expires without a release is noticed up to 1 s late there.
            wait: float = max(1, math.ceil(timeout))
        else:
            wait = round(max(timeout, 0.0), 6)
        if wait <= 0 or wait > self.options.timeout - 0.5:
            return None
        return wait

    def wait_gate(self, gate: str, wait: float) -> bool:
        """Block until ``gate`` opens (a release, or its holder's session ended) or ``wait``
        seconds (from ``gate_wait_seconds``) pass; the gate is held for no time at all.

        False at once, without waiting, when this process has ``pool_size`` gate waits in
        flight already (each blocks a connection and a thread): wait by back-off instead.
        """
        self._check_fork()
        with self._mutex:
            if self._gate_waits >= max(1, self.options.pool_size):
                return False
            self._gate_waits += 1
        try:
            self._run(lambda cursor: cursor.execute(GATE_WAIT, {"gate": gate, "wait": wait}))
        finally:
            with self._mutex:
                self._gate_waits = max(0, self._gate_waits - 1)
        return True

    def release(self, name: str, token: str) -> bool:
        params = {"name": _hex(name), "token": token}
        connection = self._take_gate_connection(name, token)
        if connection is None:
            released = self._run(lambda cursor: _execute(cursor, self.sql.release, params) == 1)
        else:
            # The row and the gate in one statement on the session holding the gate.
            gated = {**params, "gate": self._gate(name)}

            def release_gated(cursor: Cursor) -> bool:
                if _execute(cursor, self.sql.release_gated, gated) == 1:
                    return True  # the statement gave the gate back
                cursor.execute(GATE_RELEASE, gated)
                return False

            released = self._run(release_gated, connection)
        if released:
            self.waiters.notify(name)
        self.collect_if_due()
        return released

    def extend(self, name: str, token: str, ttl: float) -> bool:
        params = {"name": _hex(name), "token": token, "ttl_us": _micros(ttl)}
        extended = self._run(lambda cursor: _execute(cursor, self.sql.extend, params) == 1)
        if not extended:
            self._drop_gate(name, token)
        return extended

    def extend_many(self, renewals: Sequence[Renewal]) -> list[bool]:
        if not renewals:
            return []
        results = self._extend_each(self.sql.extend, renewals)
        for renewal, extended in zip(renewals, results, strict=True):
            if not extended:
                self._drop_gate(renewal.name, renewal.token)
        return results

    def set_value(self, name: str, token: str, value: str) -> bool:
        params = {"name": _hex(name), "token": token, "value": value}
        return self._run(lambda cursor: _execute(cursor, self.sql.set_value, params) == 1)

    def owned(self, name: str, token: str) -> bool:
        params = {"name": _hex(name), "token": token}
        return self._run(lambda cursor: int(cursor.execute(self.sql.owned, params)) == 1)

    def inspect(self, name: str) -> LockInfo | None:
        def read(cursor: Cursor) -> tuple[Any, ...] | None:
            cursor.execute(self.sql.inspect, {"name": _hex(name)})
            row: tuple[Any, ...] | None = cursor.fetchone()
            return row

        row = self._run(read)
        return None if row is None else _info(row)

    def list_locks(self, prefix: str) -> list[LockInfo]:
        params = _prefix_params(prefix)
        if params is None:
            return []
        return [_info(row) for row in self._rows(self.sql.list_locks, params)]

    def break_lock(self, name: str) -> bool:
        params = {"name": _hex(name)}
        broken = self._run(lambda cursor: _execute(cursor, self.sql.break_lock, params) == 1)
        if broken:
            self.waiters.notify(name)
        return broken

    # ---- semaphores (SQL in ``_semaphore_sql``) -----------------------------------------

    def _permits(self, *, create: bool) -> bool:
        """Whether the permits table exists; with ``create``, make it first. Made on the
        first semaphore acquire, not with the lock table: a user of locks alone needs no
        privilege on it."""
        if self._permits_ready:
            return True
        name = self.semaphores.quoted.strip("`")

        def ensure(cursor: Cursor) -> bool:
            cursor.execute(self.sql.schema, {"table": name})
            if cursor.fetchone() is not None:
                return True
            if create:
                cursor.execute(self.semaphores.create)
            return create

        self._permits_ready = self._run(ensure)
        return self._permits_ready

    def acquire_permit(
        self, name: str, token: str, ttl: float, holder: Holder, limit: int
    ) -> Grant | Busy:
        self._permits(create=True)
        params = {
            "name": _hex(name), "token": token, "ttl_us": _micros(ttl), "limit": limit,
            "host": clip(holder.host), "pid": holder.pid, "thread": clip(holder.thread),
        }
        statement = self.semaphores.acquire(limit)

        def attempt(cursor: Cursor) -> int:
            _execute(cursor, statement, params)
            return int(cursor.lastrowid)

        def soonest(cursor: Cursor) -> float | None:
            cursor.execute(self.semaphores.soonest, params)
            row = cursor.fetchone()
            return None if row is None or row[0] is None else max(0.0, int(row[0]) / 1e6)

        state = self._run(attempt)
        if state % 8 == MISMATCH:
            changed = self._run(lambda cursor: self._change_limit(cursor, name, params))
            if changed is not None:
                return changed
            state = self._run(attempt)  # the limit is ours now (or was changed back)
        if state % 8 in (GRANTED, MINE):
            self.collect_if_due()
            return Grant(state // 8)
        # Refused: a second round trip, on the contended path only, for the waiter's pause.
        return Busy(self._run(soonest))

    def _change_limit(
        self, cursor: Cursor, name: str, params: dict[str, Any]
    ) -> Grant | None:
        """A stored limit other than ours: refuse if permits of other tokens are live, else
        store ours (the record's row lock keeps acquirers out meanwhile). Our own live
        permit (a retry) is granted again as it is. None: try the acquire again."""
        cursor.execute("START TRANSACTION")
        try:
            cursor.execute(self.semaphores.limit_lock, params)
            row = cursor.fetchone()
            cursor.execute(self.semaphores.limit_count, params)
            others, mine = cursor.fetchone()
            stored = None if row is None or row[0] is None else int(row[0])
            if mine is not None:
                cursor.execute(self.semaphores.extend, params)  # a retry restarts its lease
                cursor.execute("COMMIT")
                return Grant(int(mine))
            if int(others) > 0 and stored is not None and stored != params["limit"]:
                cursor.execute("COMMIT")
                raise limit_mismatch(name, stored, params["limit"])
            cursor.execute(self.semaphores.limit_store, params)
            cursor.execute("COMMIT")
        except pymysql.err.MySQLError:
            cursor.execute("ROLLBACK")
            raise
        return None

    def release_permit(self, name: str, token: str) -> bool:
        if not self._permits(create=False):
            return False
        params = {"name": _hex(name), "token": token}
        released = self._run(lambda cursor: _execute(cursor, self.semaphores.release, params) == 1)
        self.waiters.notify(permit_key(name))
        self.collect_if_due()
        return released

    def extend_permits(self, renewals: Sequence[Renewal]) -> list[bool]:
        if not renewals:
            return []
        if not self._permits(create=False):
            return [False] * len(renewals)
        return self._extend_each(self.semaphores.extend, renewals)

    def permit_owned(self, name: str, token: str) -> bool:
        if not self._permits(create=False):
            return False
        params = {"name": _hex(name), "token": token}
        return self._run(lambda cursor: int(cursor.execute(self.semaphores.owned, params)) == 1)

    def inspect_semaphore(self, name: str) -> LockInfo | None:
        if not self._permits(create=False):
            return None
        found = _semaphore_infos(self._rows(self.semaphores.inspect, {"name": _hex(name)}))
        return found[0] if found else None

    def list_semaphores(self, prefix: str) -> list[LockInfo]:
        params = _prefix_params(prefix)
        if params is None or not self._permits(create=False):
            return []
        return _semaphore_infos(self._rows(self.semaphores.list_semaphores, params))

    def break_semaphore(self, name: str) -> bool:
        if not self._permits(create=False):
            return False
        params = {"name": _hex(name)}
        broken = self._run(
            lambda cursor: _execute(cursor, self.semaphores.break_semaphore, params) > 0
        )
        if broken:
            self.waiters.notify(permit_key(name))
        return broken


    # ---- read-write and fair locks (SQL in ``_rwlock_sql``) ----------------------------

    def _rwlock_tables(self, *, create: bool) -> bool:
        """Whether the read-write lock tables exist; with ``create``, make them first. Made
        on the first read-write (or fair) lock acquire, as the permits table is."""
        if self._rwlocks_ready:
            return True

        def ensure(cursor: Cursor) -> bool:
            cursor.execute(self.sql.schema, {"table": self.rwlocks.entries_name})
            if cursor.fetchone() is not None:
                return True
            if create:
                for statement in self.rwlocks.create:
                    cursor.execute(statement)
            return create

        self._rwlocks_ready = self._run(ensure)
        return self._rwlocks_ready

    def acquire_queued(
        self, name: str, token: str, ttl: float, holder: Holder, *, mode: str, queue_ttl: float
    ) -> Grant | Busy:
        self._rwlock_tables(create=True)
        params = {
            "name": _hex(name), "token": token, "ttl_us": _micros(ttl),
            "queue_us": _micros(queue_ttl), "mode": mode,
            "host": clip(holder.host), "pid": holder.pid, "thread": clip(holder.thread),
        }
        retried, granted, soonest_us, dropped = self._run(
            lambda cursor: _run_transaction(cursor, self.rwlocks.acquire, params)
        )
        if dropped is not None and int(dropped) > 0:
            # A lapsed lease or place may have been all that held a waiter here back.
            self.waiters.notify(queue_key(name))
        if retried is not None:
            return Grant(int(retried))
        if granted is not None:
            self.collect_if_due()
            return Grant(int(granted))
        return Busy(None if soonest_us is None else max(0.0, int(soonest_us) / 1e6))

    def release_queued(self, name: str, token: str) -> bool:
        if not self._rwlock_tables(create=False):
            return False
        params = {"name": _hex(name), "token": token}
        (released,) = self._run(lambda cursor: _run_batch(cursor, self.rwlocks.release, params))
        # A place that left may have been all that held a waiter back, as a lease may.
        self.waiters.notify(queue_key(name))
        self.collect_if_due()
        return released is not None and int(released) == 1

    def extend_queued(self, renewals: Sequence[Renewal]) -> list[bool]:
        if not renewals:
            return []
        if not self._rwlock_tables(create=False):
            return [False] * len(renewals)
        return self._extend_each(self.rwlocks.extend, renewals)

    def queued_owned(self, name: str, token: str) -> bool:
        if not self._rwlock_tables(create=False):
            return False
        params = {"name": _hex(name), "token": token}
        return self._run(lambda cursor: int(cursor.execute(self.rwlocks.owned, params)) == 1)

    def inspect_queue(self, name: str) -> LockInfo | None:
        if not self._rwlock_tables(create=False):
            return None
        found = _queue_infos(self._rows(self.rwlocks.inspect, {"name": _hex(name)}))
        return found[0] if found else None

    def list_queues(self, prefix: str) -> list[LockInfo]:
        params = _prefix_params(prefix)
        if params is None or not self._rwlock_tables(create=False):
            return []
        return _queue_infos(self._rows(self.rwlocks.list_queues, params))

    def break_queue(self, name: str) -> bool:
        if not self._rwlock_tables(create=False):
            return False
        params = {"name": _hex(name)}
        broken = self._run(lambda cursor: _execute(cursor, self.rwlocks.break_queue, params) > 0)
        if broken:
            self.waiters.notify(queue_key(name))
        return broken


def _queue_infos(rows: Sequence[tuple[Any, ...]]) -> list[LockInfo]:
    by_name: dict[bytes, tuple[int, int, list[LeaseInfo]]] = {}
    for name, fence, queued, mode, host, pid, thread, acquired_at, left_us, seq in rows:
        entry = by_name.setdefault(bytes(name), (int(fence), int(queued), []))
        if seq is not None:
            entry[2].append(LeaseInfo(
                Holder(host, int(pid), thread), acquired_at.replace(tzinfo=datetime.UTC),
                max(0.0, int(left_us) / 1e6), int(seq), str(mode),
            ))
    return [
        LockInfo(name.decode("utf-8"), fence, None, None, None, kind="rwlock",
                 leases=tuple(leases), queued=queued)
        for name, (fence, queued, leases) in by_name.items()
    ]


def _semaphore_infos(rows: Sequence[tuple[Any, ...]]) -> list[LockInfo]:
    by_name: dict[bytes, tuple[int, int | None, list[LeaseInfo]]] = {}
    for name, fence, limit, host, pid, thread, acquired_at, left_us, permit_fence in rows:
        entry = by_name.setdefault(
            bytes(name), (int(fence), None if limit is None else int(limit), [])
        )
        if permit_fence is not None:
            entry[2].append(LeaseInfo(
                Holder(host, int(pid), thread), acquired_at.replace(tzinfo=datetime.UTC),
                max(0.0, int(left_us) / 1e6), int(permit_fence),
            ))
    return [
        LockInfo(name.decode("utf-8"), fence, None, None, None, kind="semaphore",
                 limit=limit, leases=tuple(leases))
        for name, (fence, limit, leases) in by_name.items()
    ]


def _table_exists(cursor: Cursor, sql: Statements, table: str) -> bool:
    cursor.execute(sql.schema, {"table": table.strip("`")})
    return cursor.fetchone() is not None


def _run_transaction(cursor: Cursor, sql: str, params: dict[str, Any]) -> tuple[Any, ...]:
    """Run a multi-statement text that is one transaction (``START TRANSACTION`` ...
    ``COMMIT``, then a ``SELECT`` of its outcome); the one row of its one result set. The
    server stops at a failed statement, so the transaction is rolled back here; a deadlock
    victim (InnoDB rolled it back whole) runs again."""
    for retry in range(DEADLOCK_RETRIES):
        try:
            return _run_batch(cursor, sql, params)
        except pymysql.err.OperationalError as exc:
            cursor.execute("ROLLBACK")
            if exc.args[0] != ER_LOCK_DEADLOCK or retry == DEADLOCK_RETRIES - 1:
                raise
            time.sleep(0.001 * (retry + 1))
        except BaseException:
            cursor.execute("ROLLBACK")
            raise
    raise AssertionError("unreachable")


def _run_batch(cursor: Cursor, sql: str, params: dict[str, Any]) -> tuple[Any, ...]:
    """Run a multi-statement text; the one row of its one result set. Every statement's
    answer is read (an error in any of them is raised here), so the connection is left
    ready for the next command."""
    cursor.execute(sql, params)
    row: tuple[Any, ...] | None = None
    while True:
        if cursor.description is not None:
            row = cursor.fetchone()
        if not cursor.nextset():
            break
    assert row is not None
    return row


def _execute(cursor: Cursor, sql: str, params: dict[str, Any]) -> int:
    """Run a write; retry it if InnoDB chose it as a deadlock victim.

    A victim's statement is rolled back whole (autocommit), so running it again is safe.
    Racing inserts of one new key can deadlock on InnoDB's insert-intention locks even
    though each statement touches one row.
    """
    for attempt in range(DEADLOCK_RETRIES):
        try:
            return int(cursor.execute(sql, params))
        except pymysql.err.OperationalError as exc:
            if exc.args[0] != ER_LOCK_DEADLOCK or attempt == DEADLOCK_RETRIES - 1:
                raise
            time.sleep(0.001 * (attempt + 1))
    raise AssertionError("unreachable")


def _close_quietly(connection: Connection) -> None:
    try:
        connection.close()
    except Exception:
        # close() sends COM_QUIT; on a broken connection just drop the socket.
        connection._force_close()


def _prefix_params(prefix: str) -> dict[str, Any] | None:
    """The listing statements' parameters for names starting with ``prefix`` (matched on
    the stored UTF-8 bytes); None when no accepted name can (unencodable text)."""
    try:
        raw = prefix.encode("utf-8")
    except UnicodeEncodeError:
        return None
    return {"prefix": raw.hex(), "length": len(raw)}


def _hex(name: str) -> str:
    return name.encode("utf-8").hex()


def _micros(seconds: float) -> int:
    return max(1, round(seconds * 1_000_000))


def _info(row: tuple[Any, ...]) -> LockInfo:
    name, fence, live, host, pid, thread, acquired_at, left_us, value = row
    text = bytes(name).decode("utf-8")
    if not live:
        return LockInfo(text, int(fence), None, None, None)
    return LockInfo(
        text,
        int(fence),
        Holder(host, int(pid), thread),
        acquired_at.replace(tzinfo=datetime.UTC),
        max(0.0, int(left_us) / 1e6),
        value=None if value is None else str(value),
    )
