"""The only code that touches PyMySQL for ``mysql://``: a small pool of idle connections, all
in autocommit, the gate connections kept aside (see ``_locks``), fork safety, the lock
table's creation and schema check, and the helpers that run statements. Shared by both
flavours. A connection that failed is closed, never reused; an idle one the server closed
meanwhile (a restart) is noticed and dropped before use. The driver's errors leave as they
are, and so do the ``StoreFault``s raised here (a closed client, a missing ALTER privilege):
the store's base translates them (``_errors.DRIVER_ERRORS``)."""

from __future__ import annotations

import math
import os
import ssl
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

# PyMySQL ships no type information (types-PyMySQL is a separate stub package): its objects
# are typed Any here, and the few values we take out of them are converted explicitly.
import pymysql  # type: ignore[import-untyped]
import pymysql.connections  # type: ignore[import-untyped]
import pymysql.cursors  # type: ignore[import-untyped]
from pymysql.constants import CLIENT  # type: ignore[import-untyped]

from tenure._errors import ConfigurationError, StoreFault
from tenure._types import Kind, Renewal
from tenure.backends._sql_common import (
    SCHEMA_VERSION,
    SqlOptions,
    abandon,
    has_pending_input,
    parse_schema_mark,
)
from tenure.backends.mysql._errors import (
    ER_BAD_FIELD_ERROR,
    ER_DUP_FIELDNAME,
    ER_LOCK_DEADLOCK,
    ER_NO_SUCH_TABLE,
)
from tenure.backends.mysql._sql import SESSION_SETUP, SQL_MODE, Statements

__all__ = ["Connection", "Cursor", "Pool", "SharedContextConnection", "close_quietly",
           "execute", "hexed", "micros", "prefix_params", "run_batch", "run_transaction",
           "table_exists"]

T = TypeVar("T")
Connection = Any
"""A ``pymysql.connections.Connection``."""
Cursor = Any
"""A ``pymysql.cursors.Cursor``."""

DEADLOCK_RETRIES = 5


class SharedContextConnection(pymysql.connections.Connection):  # type: ignore[misc]
    """PyMySQL's connection, with its "preferred TLS" context made once per process.

    From PyMySQL 1.2 on, a connection given no TLS option still makes a TLS context, to
    encrypt (unverified) if the server offers TLS. ``ssl.create_default_context`` loads the
    system's CA store for it: about 30 ms of CPU per connection, two thirds of a connect,
    lock and close, for a context that verifies nothing. Made without options it is the
    same every time, and one context serves any number of threads, so the first is kept.
    Given TLS options, the context is PyMySQL's own, made for each connection as before."""

    _preferred: ssl.SSLContext | None = None
    _preferred_made = threading.Lock()

    def _create_ssl_ctx(self, sslp: Any) -> ssl.SSLContext:
        if sslp:
            made: ssl.SSLContext = super()._create_ssl_ctx(sslp)
            return made
        with SharedContextConnection._preferred_made:
            if SharedContextConnection._preferred is None:
                SharedContextConnection._preferred = super()._create_ssl_ctx(sslp)
            return SharedContextConnection._preferred


class Pool:
    """The connections to one lock table on one server. Thread-safe."""

    def __init__(
        self, connect_args: dict[str, Any], options: SqlOptions, display: str, sql: Statements
    ) -> None:
        self.options = options
        self.display = display
        self.sql = sql
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
        self.mutex = threading.Lock()
        self._idle: list[Connection] = []
        self.gates: dict[str, tuple[str, Connection]] = {}
        """name -> (token of the lease it serves, the connection whose session holds the
        name's gate). One per name: the server grants a name to one lease at a time."""
        self.gate_waits = 0
        self.mariadb: bool | None = None
        self.pid = os.getpid()
        self._ready = False
        self.ready_kinds: dict[Kind, bool] = {}
        """The optional kinds whose tables are known to exist (``_kind_table``)."""
        self.closed = False

    def _connect(self) -> Connection:
        connection: Connection = SharedContextConnection(**self._connect_args)
        try:
            with connection.cursor() as cursor:
                cursor.execute(SESSION_SETUP)
        except BaseException:
            close_quietly(connection)
            raise
        return connection

    def checkout(self) -> Connection:
        if self.closed:
            raise StoreFault("the client is closed")
        self.check_fork()
        while True:
            with self.mutex:
                connection = self._idle.pop() if self._idle else None
            if connection is None:
                return self._connect()
            if not connection.open or has_pending_input(connection._sock.fileno()):
                close_quietly(connection)  # the server closed it while idle
                continue
            return connection

    def check_fork(self) -> None:
        if self.pid != os.getpid():
            # A forked child: the parent's connections and mutex are not ours to touch.
            self.mutex = threading.Lock()
            abandon(self._idle)
            abandon(connection for _, connection in self.gates.values())
            self._idle = []
            self.gates = {}
            self.gate_waits = 0
            self.pid = os.getpid()

    def _checkin(self, connection: Connection) -> None:
        with self.mutex:
            keep = (
                not self.closed
                and self.pid == os.getpid()
                and len(self._idle) < self.options.pool_size
            )
            if keep:
                self._idle.append(connection)
        if not keep:
            close_quietly(connection)

    def close(self) -> None:
        with self.mutex:
            self.closed = True
            idle, self._idle = self._idle, []
            # Ending the sessions opens their gates.
            idle.extend(connection for _, connection in self.gates.values())
            self.gates = {}
        if self.pid == os.getpid():
            for connection in idle:
                close_quietly(connection)
        else:
            abandon(idle)

    def extend_each(self, statement: str, renewals: Sequence[Renewal]) -> list[bool]:
        """Renew each lease with ``statement`` (a lock's, a permit's or a read-write lease's
        extend): one connection, one autocommit statement per lease, each atomic on its own
        (a batch in one transaction would only hold the first rows' locks for longer)."""

        def extend_all(cursor: Cursor) -> list[bool]:
            return [
                execute(cursor, statement, {
                    "name": hexed(r.name), "token": r.token, "ttl_us": micros(r.ttl),
                }) == 1
                for r in renewals
            ]

        return self.run(extend_all)

    def rows(self, statement: str, params: dict[str, Any]) -> tuple[tuple[Any, ...], ...]:
        """Every row ``statement`` reads (an inspect or a listing)."""

        def read(cursor: Cursor) -> tuple[tuple[Any, ...], ...]:
            cursor.execute(statement, params)
            rows: tuple[tuple[Any, ...], ...] = cursor.fetchall()
            return rows

        return self.run(read)

    def run(
        self, work: Callable[[Cursor], T], connection: Connection | None = None,
        *, keep: Callable[[T], bool] = lambda _: False,
    ) -> T:
        """Run ``work`` on a pooled connection (or the given one, a gate's), then return the
        connection to the pool unless ``keep(result)`` says it now holds a gate."""
        if self.closed:
            if connection is not None:
                close_quietly(connection)
            raise StoreFault("the client is closed")
        if connection is None:
            connection = self.checkout()
        try:
            if not self._ready:
                self._prepare(connection)
                self._ready = True
            with connection.cursor() as cursor:
                result = work(cursor)
        except BaseException as exc:
            close_quietly(connection)
            if isinstance(exc, pymysql.err.MySQLError) and exc.args and exc.args[0] in (
                ER_NO_SUCH_TABLE, ER_BAD_FIELD_ERROR
            ):
                # Dropped behind our back (or made again by a tenure from before the value
                # columns): look for, create and upgrade the tables again.
                self._ready = False
                self.ready_kinds.clear()
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
            self.mariadb = "mariadb" in str(version_text).lower()
        comment = None if row is None else row[0]
        self._check_version(comment)
        with connection.cursor() as cursor:
            cursor.execute(self.sql.value_columns, {"table": self.sql.table})
            (present,) = cursor.fetchone()
            if int(present) < 2:
                self.add_columns(
                    cursor, self.sql.add_value_columns,
                    f"the election value columns to table {self.sql.table!r}",
                    "see the docs on leader elections",
                )

    def add_columns(self, cursor: Cursor, alter: str, what: str, docs: str) -> None:
        """Run ``alter``, an ADD COLUMN that a look found needed, on a table from before
        those columns: the in-place upgrade every table of ours takes."""
        # An ALTER waiting for the table's metadata lock (a long transaction of someone
        # else's on it) would queue every later statement on the table behind it: it gives
        # up after the statement timeout instead, and the next operation tries again.
        cursor.execute(
            "SET SESSION lock_wait_timeout = %s", (max(1, math.ceil(self.options.timeout)),)
        )
        try:
            cursor.execute(alter)
        except pymysql.err.MySQLError as exc:
            # Another process added them between our look and our ALTER: done.
            if exc.args[0] != ER_DUP_FIELDNAME:
                # Not a failure of the server: a privilege to grant once.
                raise StoreFault(
                    f"cannot add {what} (this needs the ALTER privilege once; {docs}): {exc}"
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


def table_exists(cursor: Cursor, sql: Statements, table: str) -> bool:
    cursor.execute(sql.schema, {"table": table.strip("`")})
    return cursor.fetchone() is not None


def run_transaction(cursor: Cursor, sql: str, params: dict[str, Any]) -> tuple[Any, ...]:
    """Run a multi-statement text that is one transaction (``START TRANSACTION`` ...
    ``COMMIT``, then a ``SELECT`` of its outcome); the one row of its one result set. The
    server stops at a failed statement, so the transaction is rolled back here; a deadlock
    victim (InnoDB rolled it back whole) runs again."""
    for retry in range(DEADLOCK_RETRIES):
        try:
            return run_batch(cursor, sql, params)
        except pymysql.err.OperationalError as exc:
            cursor.execute("ROLLBACK")
            if exc.args[0] != ER_LOCK_DEADLOCK or retry == DEADLOCK_RETRIES - 1:
                raise
            time.sleep(0.001 * (retry + 1))
        except BaseException:
            cursor.execute("ROLLBACK")
            raise
    raise AssertionError("unreachable")


def run_batch(cursor: Cursor, sql: str, params: dict[str, Any]) -> tuple[Any, ...]:
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


def execute(cursor: Cursor, sql: str, params: dict[str, Any]) -> int:
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


def close_quietly(connection: Connection) -> None:
    try:
        connection.close()
    except Exception:
        # close() sends COM_QUIT; on a broken connection just drop the socket.
        connection._force_close()


def prefix_params(prefix: str) -> dict[str, Any] | None:
    """The listing statements' parameters for names starting with ``prefix`` (matched on
    the stored UTF-8 bytes); None when no accepted name can (unencodable text)."""
    try:
        raw = prefix.encode("utf-8")
    except UnicodeEncodeError:
        return None
    return {"prefix": raw.hex(), "length": len(raw)}


def hexed(name: str) -> str:
    return name.encode("utf-8").hex()


def micros(seconds: float) -> int:
    return max(1, round(seconds * 1_000_000))
