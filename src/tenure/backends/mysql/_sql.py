"""The SQL behind ``mysql://`` (MariaDB and MySQL), with each statement's contract above it.

Every lock operation is ONE autocommit statement on an InnoDB table. The acquire is an
``INSERT ... ON DUPLICATE KEY UPDATE``: InnoDB locks the existing row before the update part
runs, so two sessions racing for a lock are serialised on that row lock and the second one
judges the row as the first one left it. Nobody ever reads the row and then decides.

How the client knows for certain whether it won: affected-row counts are no use (with the
CLIENT_FOUND_ROWS flag, "inserted" and "found but unchanged" both count 1; without it,
a retried acquire that changes nothing counts 0). Instead the statement reports its outcome
through ``LAST_INSERT_ID(expr)``, whose last value in a statement is sent back in the OK
packet as the insert id (``cursor.lastrowid``):
- the row is absent: the VALUES list sets it to the server's clock in microseconds since
  the epoch, the new row's fence;
- the update part grants the lock: it sets it to the new fence, max(the stored fence + 1, the
  server's clock in microseconds);
- the update part refuses: it sets it to 0.
``IF()`` evaluates only the branch it takes, and the VALUES list is evaluated before the
duplicate is found, so the update part always has the last word.

The update part's assignments run left to right, each seeing the columns already assigned
(MySQL's and MariaDB's documented behaviour; the connection pins ``sql_mode`` so MariaDB's
SIMULTANEOUS_ASSIGNMENT can't change that). So ``acquired_at``, ``fence`` and ``token`` are
assigned first, judged on the old row by ``CLAIMABLE``; after ``token``, "we won" is simply
``token <=> %(token)s`` (tokens are 128-bit random), which the remaining columns test.

Fences never go back (DESIGN rule 10): strictly increasing per name while its row lives, by
the counter, and never below the server's clock in microseconds, so a row removed by the
clean-up below (or lost with the server's data) starts again above every fence it handed out,
as long as the server's clock does not step back by more than the time the row was gone. The
clock reads ``EPOCH_US``, in the same statement as the grant: no extra round trip, and no
client clock.

Clean-up (``gc_after``): a released or broken lease keeps its row, with ``expires_at`` set to
the moment it ended, so every row carries when its last lease ended (or ends). ``COLLECT``
deletes, in one pass over at most ``batch`` rows in key order (resumed at ``after`` by the next
pass), the rows of that range whose last lease ended before now - gc_after. The condition is
the row's own, judged by the DELETE on the row's latest version under its row lock: a lease
granted meanwhile makes the row live again, and the row stays. A row released by a tenure
older than this clean-up has no end time (NULL): it is idle for an unknown time, and goes.

Election values (``acquire_value``, ``set_value``): a leader's value lives in its lease row,
in ``value``, with ``value_token``, the token that wrote it. A value counts only while that
token holds the row's live lease (``inspect`` shows it only then), so a tenure from before
these columns, whose statements neither set nor clear them, can never make a stale value
look current: its grants carry tokens of their own. The plain lock's statements leave both
columns alone on a grant (nothing added to the mutex's acquire) and clear them on a release
or a break. The columns are added to a table from before them at connect (``value_columns``,
``add_value_columns``); the schema version is unchanged, so older tenure processes keep
working on the same table.

Time is ``UTC_TIMESTAMP(6)``: like ``NOW(6)`` it is fixed at the start of the statement
(``SYSDATE()`` is the one that moves), so every mention in a statement is the same instant,
and being UTC it needs no time-zone setting. Columns are DATETIME(6), never converted.

Names are VARBINARY(1024) holding the name's UTF-8 bytes: compared byte for byte, so no
collation can merge "a" and "A", "a" and "a ", or two Unicode normalisations. They travel
hex-encoded, ``UNHEX(%(name)s)``: the text that reaches the server is ``[0-9a-f]`` only,
whatever the escaping rules of the connection (NO_BACKSLASH_ESCAPES, character sets).

Parameters (PyMySQL's ``%(name)s``): ``name`` hex of the UTF-8 name, ``token`` text,
``ttl_us`` integer microseconds, ``host``/``thread`` text (at most 255 characters), ``pid``,
``value`` text (an election's value: at most 4096 characters).
"""

from __future__ import annotations

import dataclasses
import functools

from tenure.backends._sql_common import SCHEMA_VERSION, schema_mark
from tenure.backends.mysql._sweep_sql import SWEEP_BATCH, sweep_answer, sweep_window

__all__ = [
    "CUTOFF", "GATE_RELEASE", "GATE_TAKE", "GATE_WAIT", "LEASE_END", "NOW", "SESSION_SETUP",
    "SQL_MODE", "LeaseStatements", "Statements", "floor_fence", "starts_with",
]

SQL_MODE = "STRICT_ALL_TABLES,NO_ENGINE_SUBSTITUTION,ERROR_FOR_DIVISION_BY_ZERO"
"""Pinned on every connection: strict errors instead of silent truncation, and none of the
modes that change how the statements below evaluate."""

# Run once per connection. The lock wait bound is whole seconds; see the backend.
SESSION_SETUP = "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED"

# The release gate (see ``_store`` and docs/backends/sql.md): a user-level lock
# (``GET_LOCK``) that the holder's session takes with its grant and gives back with its
# release, so that waiters blocked on it wake the moment a release commits. The lease row
# stays the only truth of who holds the lock: the gate only wakes.

# Input: gate, wait (seconds). Blocks until the gate is free (then takes it and gives it back
# in the same statement, so a waiter never holds it longer than that) or ``wait`` passes.
# Output: 1 = the gate was free or freed (a release, or the holder's session ended), 0 = timed
# out, NULL = error. ``IF`` evaluates only the branch it takes.
GATE_WAIT = "SELECT IF(GET_LOCK(%(gate)s, %(wait)s) = 1, RELEASE_LOCK(%(gate)s), 0)"

# Inputs: gate, hold_wait. Takes the gate after a grant that inserted the name's row (see
# ``Statements.acquire_gated``). Output: 1 = this session holds it now.
GATE_TAKE = "SELECT GET_LOCK(%(gate)s, %(hold_wait)s)"

# Input: gate. Gives the gate back (the lease was lost, or its release ran elsewhere).
GATE_RELEASE = "DO RELEASE_LOCK(%(gate)s)"

NOW = "UTC_TIMESTAMP(6)"
EPOCH_US = f"TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', {NOW})"
"""The server's clock in microseconds since the epoch, a BIGINT: DATETIME arithmetic, so no
time zone setting takes part (``UNIX_TIMESTAMP`` would read the session's)."""
CUTOFF = f"{NOW} - INTERVAL %(gc_us)s MICROSECOND"
"""Input ``gc_us``: a record whose last lease ended before this is idle long enough."""
LEASE_END = f"{NOW} + INTERVAL %(ttl_us)s MICROSECOND"
"""Input ``ttl_us``: when a lease granted or renewed now ends."""


def starts_with(column: str) -> str:
    """Inputs ``prefix`` (hex of its UTF-8 bytes), ``length`` (its byte count): ``column``
    starts with those bytes. A range of the key, then the exact test; no LIKE, so % and _
    in a prefix are plain bytes."""
    return f"{column} >= UNHEX(%(prefix)s) AND LEFT({column}, %(length)s) = UNHEX(%(prefix)s)"


VALUE_COLUMNS = (
    "value TEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL, "
    "value_token VARBINARY(255) NULL"
)
"""An election's value (4096 characters at most: up to 16 KiB of UTF-8, within TEXT's
64 KiB) and the token that wrote it; see the module docstring."""


def floor_fence(counter: str) -> str:
    """The fence of a new grant: after ``counter`` (the last fence granted) and never below
    the server's clock, so that it never goes back when the record was removed or lost."""
    return f"GREATEST({counter} + 1, {EPOCH_US})"


CLAIMABLE = f"(token IS NULL OR expires_at <= {NOW} OR token <=> %(token)s)"
OURS = "token <=> %(token)s"
LIVE = f"token IS NOT NULL AND expires_at > {NOW}"
FREE = (
    f"token = NULL, expires_at = {NOW}, acquired_at = NULL, host = NULL, pid = NULL, "
    "thread = NULL"
)
"""A lease row's end (the lock table's and the semaphore slots')."""
FREE_LOCK = FREE + ", value = NULL, value_token = NULL"
"""``FREE`` in the lock table, whose lease ends with its election value."""
FREE_GATED = FREE_LOCK.replace(
    "thread = NULL", "thread = IF(RELEASE_LOCK(%(gate)s) IS NULL, NULL, NULL)"
)
"""``FREE_LOCK``, and RELEASE_LOCK of the gate (evaluated once per updated row: the one row).
``FREE`` keeps in ``expires_at`` when the lease ended (it was live until now): the clean-up's
measure of how long the record has been idle."""


class LeaseStatements:
    """Every kind's release, extend, ownership check and break, one template each, from
    what tells a kind's lease rows apart: the table they are in (``leases``), the token's
    live lease of the name (``mine``: inputs name, token), every live lease of the name
    (``live``: input name) and the assignments that end one (``ended``). A kind whose
    release is more than one update writes its own."""

    @property
    def leases(self) -> str:
        raise NotImplementedError

    @property
    def mine(self) -> str:
        raise NotImplementedError

    @property
    def live(self) -> str:
        raise NotImplementedError

    @property
    def ended(self) -> str:
        raise NotImplementedError

    # Inputs: name, token. Ends the token's live lease; keeps the fence. Affected rows
    # (CLIENT_FOUND_ROWS: rows matched): 1 = released.
    @functools.cached_property
    def release(self) -> str:
        return f"UPDATE {self.leases} SET {self.ended} WHERE {self.mine}"

    # Inputs: name, token, ttl_us. Resets the expiry of the token's live lease to now + ttl.
    # Affected rows (rows matched, so an expiry that happens to come out unchanged still
    # counts): 1 = extended.
    @functools.cached_property
    def extend(self) -> str:
        return f"UPDATE {self.leases} SET expires_at = {LEASE_END} WHERE {self.mine}"

    # Inputs: name, token. Output: a row if the token holds a live lease. Read-only.
    @functools.cached_property
    def owned(self) -> str:
        return f"SELECT 1 FROM {self.leases} WHERE {self.mine}"

    # Input: name. Ends every live lease of the name, whoever holds it (the operator's
    # break); keeps the fence. Affected rows (rows matched): the live leases ended.
    @functools.cached_property
    def breaking(self) -> str:
        return f"UPDATE {self.leases} SET {self.ended} WHERE {self.live}"


@dataclasses.dataclass(frozen=True)
class Statements(LeaseStatements):
    table: str
    """The validated table name, unquoted."""

    @property
    def leases(self) -> str:
        return self.quoted

    @property
    def mine(self) -> str:
        return f"name = UNHEX(%(name)s) AND token = %(token)s AND expires_at > {NOW}"

    @property
    def live(self) -> str:
        return f"name = UNHEX(%(name)s) AND {LIVE}"

    @property
    def ended(self) -> str:
        return FREE_LOCK

    @functools.cached_property
    def quoted(self) -> str:
        return f"`{self.table}`"

    # Input: table (unquoted). Output: the table's comment, which carries the schema
    # version, or no row if the table does not exist in the connection's database.
    @functools.cached_property
    def schema(self) -> str:
        return (
            "SELECT TABLE_COMMENT FROM information_schema.TABLES "
            "WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = %(table)s"
        )

    # No parameters. Safe to run from many processes at once (InnoDB's metadata lock
    # serialises it; the losers see the table exist). The primary key is the name's bytes:
    # 1024 bytes fits InnoDB's 3072-byte key limit (DYNAMIC rows, the default since
    # MySQL 5.7 and MariaDB 10.2).
    @functools.cached_property
    def create(self) -> str:
        return f"""
CREATE TABLE IF NOT EXISTS {self.quoted} (
    name        VARBINARY(1024) NOT NULL,
    fence       BIGINT NOT NULL,
    token       VARBINARY(255) NULL,
    expires_at  DATETIME(6) NULL,
    acquired_at DATETIME(6) NULL,
    host        VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL,
    pid         BIGINT NULL,
    thread      VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL,
    {VALUE_COLUMNS},
    PRIMARY KEY (name)
) ENGINE = InnoDB COMMENT = '{schema_mark(SCHEMA_VERSION)}'
"""

    # Input: table (unquoted). Output: one row, how many of the value columns the table
    # has (0 for a table from before them, 2 once added).
    @functools.cached_property
    def value_columns(self) -> str:
        return (
            "SELECT COUNT(*) FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() "
            "AND TABLE_NAME = %(table)s AND COLUMN_NAME IN ('value', 'value_token')"
        )

    # No parameters. Adds both value columns in one statement (both or neither), at the end
    # of the row: an instant change on MySQL 8 and MariaDB 10.3+, no table copy. Run when
    # ``value_columns`` counted 0; a process that raced us there fails with a duplicate
    # column (ER_DUP_FIELDNAME), which means done.
    @functools.cached_property
    def add_value_columns(self) -> str:
        return f"ALTER TABLE {self.quoted} ADD COLUMN ({VALUE_COLUMNS})"

    # Inputs: name, token, ttl_us, host, pid, thread. Output: the insert id (see the module
    # docstring): the fence when granted (absent row: the server's clock in microseconds;
    # free or expired row: max(fence + 1, that clock);
    # already ours, a retried acquire: the same fence, with the expiry reset and acquired_at
    # kept), 0 when another token holds a live lease (nothing changed).
    @functools.cached_property
    def acquire(self) -> str:
        return self._acquire("%(pid)s")

    # ``acquire`` that also stores an election's value with the lease it grants. Extra
    # input: value. A new lease (absent, free or expired row) stores ``value``, tagged with
    # ``token``; a retry of ours (the row's token is ours) keeps the value already stored if
    # we wrote it (a proclaim's may be newer than the retry's). Refused: nothing changes.
    # The value columns are assigned first, judged on the old row as ``acquired_at`` is.
    @functools.cached_property
    def acquire_value(self) -> str:
        return self._acquire("%(pid)s", value=True)

    # ``acquire_gated`` that stores a value, as ``acquire_value`` does.
    @functools.cached_property
    def acquire_value_gated(self) -> str:
        return self._acquire(
            "%(pid)s + 0 * COALESCE(GET_LOCK(%(gate)s, %(hold_wait)s), 0)", value=True
        )

    def _acquire(self, pid: str, *, value: bool = False) -> str:
        columns, values, update = "", "", ""
        if value:
            columns = ", value, value_token"
            values = ", %(value)s, %(token)s"
            update = f"""
    value = IF({CLAIMABLE}, IF({OURS} AND value_token <=> %(token)s, value, %(value)s), value),
    value_token = IF({CLAIMABLE}, %(token)s, value_token),"""
        return f"""
INSERT INTO {self.quoted}
    (name, fence, token, expires_at, acquired_at, host, pid, thread{columns})
VALUES (UNHEX(%(name)s), LAST_INSERT_ID({EPOCH_US}), %(token)s,
        {LEASE_END}, {NOW}, %(host)s, %(pid)s, %(thread)s{values})
ON DUPLICATE KEY UPDATE{update}
    acquired_at = IF({CLAIMABLE}, IF({OURS}, acquired_at, {NOW}), acquired_at),
    fence = IF({CLAIMABLE}, LAST_INSERT_ID(IF({OURS}, fence, {floor_fence('fence')})),
               fence + LAST_INSERT_ID(0)),
    token = IF({CLAIMABLE}, %(token)s, token),
    expires_at = IF({OURS}, {LEASE_END}, expires_at),
    host = IF({OURS}, %(host)s, host),
    pid = IF({OURS}, {pid}, pid),
    thread = IF({OURS}, %(thread)s, thread)
"""

    # ``acquire`` that also takes the name's gate when it grants on an existing row, in the
    # same statement (no second statement, no second result set: each costs about as much
    # as the upsert itself). Extra inputs: gate, hold_wait (seconds: a waiter passes through
    # the gate for microseconds). Output: as ``acquire``; affected rows 2 (an existing row
    # updated) on a grant means GET_LOCK ran, 1 (a new row inserted) that it did not: the
    # VALUES list is evaluated before the duplicate is found, so it takes no gate. GET_LOCK
    # runs after the row lock was taken (a statement chosen as a deadlock victim waited for
    # that lock and never got here), so a retried statement does not take the gate twice.
    @functools.cached_property
    def acquire_gated(self) -> str:
        return self._acquire("%(pid)s + 0 * COALESCE(GET_LOCK(%(gate)s, %(hold_wait)s), 0)")

    # After a refused ``acquire``, for the waiter. Inputs: name, gate. Output: one row:
    # the holder's remaining lease in microseconds (see ``ttl_left``; NULL: unknown), and
    # whether some session holds the gate (IS_USED_LOCK), i.e. whether a release will open
    # it; if not, the waiter falls back to back-off.
    @functools.cached_property
    def refusal(self) -> str:
        return f"SELECT ({self.ttl_left}), IS_USED_LOCK(%(gate)s) IS NOT NULL"

    # ``release`` that also gives the gate back, in the same statement on the session that
    # holds the gate, if the row was ours (else the caller runs GATE_RELEASE). The gate
    # opens before the row's update commits; a waiter it wakes runs ``acquire``, which
    # waits for that row lock and so judges the row as the release left it.
    @functools.cached_property
    def release_gated(self) -> str:
        return f"UPDATE {self.quoted} SET {FREE_GATED} WHERE {self.mine}"

    # Input: name. Output: the holder's remaining lease in microseconds (NULL or no row:
    # unknown), for a refused acquire's back-off. Read-only; a separate statement, so it may
    # already see a later holder: it only sizes a pause.
    @functools.cached_property
    def ttl_left(self) -> str:
        return (
            f"SELECT TIMESTAMPDIFF(MICROSECOND, {NOW}, expires_at) FROM {self.quoted} "
            f"WHERE name = UNHEX(%(name)s) AND token IS NOT NULL"
        )

    # Inputs: name, token, value. Replaces the value if this token holds a live lease it
    # was granted with a value (``value_token``: a plain lock's lease has none to replace).
    # Affected rows (rows matched, so the same value again still counts): 1 = replaced.
    @functools.cached_property
    def set_value(self) -> str:
        return (
            f"UPDATE {self.quoted} SET value = %(value)s "
            f"WHERE name = UNHEX(%(name)s) AND token = %(token)s "
            f"AND value_token = %(token)s AND expires_at > {NOW}"
        )

    # One pass of the clean-up (see the module docstring and ``_sweep_sql``), autocommit
    # statements sent as one text: the window, then the DELETE of its idle rows. Output: the
    # `sweep_answer` row, with the rows deleted.
    @functools.cached_property
    def collect(self) -> str:
        return f"""
{sweep_window(self.quoted)}
DELETE FROM {self.quoted}
WHERE {SWEEP_BATCH}
  AND (expires_at IS NULL OR expires_at <= {CUTOFF});
{sweep_answer("ROW_COUNT()")}
"""

    @functools.cached_property
    def _info(self) -> str:
        return (
            f"SELECT name, fence, {LIVE}, host, pid, thread, acquired_at, "
            f"TIMESTAMPDIFF(MICROSECOND, {NOW}, expires_at), "
            f"IF(value_token <=> token AND {LIVE}, value, NULL) FROM {self.quoted} "
        )

    # Input: name. Output: at most one row (name bytes, fence, live, host, pid, thread,
    # acquired_at, ttl_left in microseconds, the value: only while the token that wrote it
    # holds the live lease). One consistent read of the row: holder, fence and value belong
    # together. Locks nothing.
    @functools.cached_property
    def inspect(self) -> str:
        return self._info + "WHERE name = UNHEX(%(name)s)"

    # Inputs: see `starts_with`. Output: the rows of `inspect` for every name starting with
    # the prefix, in byte order. A range scan of the primary key, and a consistent read:
    # blocks no writer.
    @functools.cached_property
    def list_locks(self) -> str:
        return self._info + f"WHERE {starts_with('name')} ORDER BY name"
