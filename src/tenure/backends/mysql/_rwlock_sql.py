"""The SQL of MySQL/MariaDB read-write and fair locks, with each statement's contract above it.

Two tables beside the lock table, made on the first read-write (or fair) lock acquire, so a
user of plain locks alone needs no privilege on them:

- ``{table}_rwlocks``: one record row per name: ``fence`` (the last fence issued, shared by
  reads and writes) and ``arrivals`` (the last arrival position given to a waiting place).
  Its row lock serialises the acquires of the name. Deleted by the clean-up only.
- ``{table}_rwlock_entries``: one row per holder lease or waiting place, keyed (name, token):
  ``entry`` 'lease' or 'place', ``mode`` 'read' or 'write', ``seq`` (a lease's fence, a
  place's arrival position; 0 once released), ``expires_at`` by the server's clock, the
  holder's details (a place's are its waiter's, and its ``acquired_at`` when it was taken:
  ``tenure show`` lists them; NULL on a place an older tenure took), ``fair`` 1 on a fair
  lock's (NULL on a read-write lock's, and on rows from before the column: only ``inspect``
  reads it, no grant does; added to an older table in place, ``add_fair_column``). A
  released lease or place stays, lapsed, with ``expires_at`` = when it ended, until the
  name's next acquire (which drops lapsed entries) or the clean-up: so the entries say when
  the name was last used.

Fences never go back (DESIGN rule 10): a grant's fence is max(the record's fence + 1, the
server's clock in microseconds) (``floor_fence``), read in the acquire's own transaction, so
a record the clean-up removed (or the server lost) starts again above every fence it gave.

Clean-up (``gc_after``, ``collect``): one transaction over the records of at most ``batch``
names in key order. It locks those record rows first, as every acquire does (acquires of
those names wait; same order, so no deadlock), then deletes the records that have no entry
ending after now - gc_after in a fresh read (so no live lease and no waiting place, and the
last one ended that long ago), and the entries that ended before then. Entries are added only
under the record's lock, so none appears for a locked name meanwhile; a record created while
the pass ran is not in that read, and stays.

An acquire is ACQUIRE: one short transaction whose statements travel as one text (the
connections allow multi-statement texts), so the whole decision costs one round trip, like a
semaphore's. It first upserts the name's record row, which takes its row lock until the
commit (concurrent acquirers of the name queue there); under READ COMMITTED every later
statement reads a fresh snapshot, so it sees every entry committed before that lock was
ours. It then reads the server's clock ONCE (``@tenure_now``): dropping lapsed entries,
judging liveness and writing expiries all use that one instant. Statements hand their
outcomes on through session variables (``@tenure_*``), every one of them set afresh by every
acquire before it is read. The server runs the statements in order and stops at the first
error; the client then rolls back.

Entries are only ever added by ACQUIRE, under the record's lock. The single statements that
change entries without it (release, renewals, break) only delete rows or push a live lease's
expiry later, so they can make a decision ACQUIRE took on a read stale only in the safe
direction (it queued where it could have been granted, and tries again). Its DELETE of lapsed
entries is a locking read of the latest versions: a renewal committed while it waited for a
row lock is seen, and that lease is not taken for lapsed. Every statement locks the
entries it touches in primary-key order; should InnoDB still find a cycle (racing inserts of
a new record row), it rolls one transaction back whole and the client runs it again.

Parameters (PyMySQL's ``%(name)s``): ``name`` hex of the name's UTF-8 bytes, ``token`` text,
``ttl_us``/``queue_us`` integer microseconds, ``mode`` 'read' or 'write', ``host``/``thread``
text, ``pid`` integer.
"""

from __future__ import annotations

import dataclasses
import functools

from tenure.backends.mysql._sql import CUTOFF, NOW, LeaseStatements, floor_fence, starts_with
from tenure.backends.mysql._sweep_sql import SWEEP_BATCH, sweeping_records

__all__ = ["RwlockStatements"]

_NAME = "name = UNHEX(%(name)s)"
_MINE = f"{_NAME} AND token = %(token)s"
_AT = "CAST(@tenure_now AS DATETIME(6))"
"""The acquire's one instant. A user variable keeps a DATETIME as text: cast back, so every
comparison and sum is a DATETIME one."""
_FLOORED = floor_fence("fence").replace(NOW, _AT)
"""A grant's fence, by the acquire's one instant."""


@dataclasses.dataclass(frozen=True)
class RwlockStatements(LeaseStatements):
    """The two tables' statements; extend, owned and breaking are ``LeaseStatements'`` over
    the lease entries (a place is never extended, owned or broken), the release its own."""

    table: str
    """The lock table's validated name; the two tables are named after it (within MySQL's
    64-character identifiers)."""

    @property
    def leases(self) -> str:
        return self.entries

    @property
    def mine(self) -> str:
        """The token's live lease entry. An ended lease keeps its token and, as expires_at,
        the time it ended: NOW is read when a statement starts, so an extend that waited for
        the row while a release or break ended it would see that end after its NOW and take
        the lease for live (and revive it): seq 0 marks it ended."""
        return f"{_MINE} AND entry = 'lease' AND expires_at > {NOW} AND seq > 0"

    @property
    def live(self) -> str:
        """The name's live lease entries: a break ends them as a release does (places and
        the record's fence stay; ended leases are left to the next acquire)."""
        return f"{_NAME} AND entry = 'lease' AND expires_at > {NOW}"

    @property
    def ended(self) -> str:
        return f"expires_at = {NOW}, seq = 0"

    @functools.cached_property
    def records(self) -> str:
        return f"`{self.table[:56]}_rwlocks`"

    @functools.cached_property
    def entries_name(self) -> str:
        return f"{self.table[:49]}_rwlock_entries"

    @functools.cached_property
    def entries(self) -> str:
        return f"`{self.entries_name}`"

    # No parameters. Run in this order: the entries table is made last, so its existence
    # (``Statements.schema`` on ``entries_name``) means both are there. Safe from many
    # processes at once (InnoDB's metadata lock serialises them; the losers see the table).
    @functools.cached_property
    def create(self) -> tuple[str, str]:
        return (
            f"""
CREATE TABLE IF NOT EXISTS {self.records} (
    name     VARBINARY(1024) NOT NULL,
    fence    BIGINT NOT NULL,
    arrivals BIGINT NOT NULL,
    PRIMARY KEY (name)
) ENGINE = InnoDB
""",
            f"""
CREATE TABLE IF NOT EXISTS {self.entries} (
    name        VARBINARY(1024) NOT NULL,
    token       VARBINARY(255) NOT NULL,
    entry       ENUM('lease', 'place') NOT NULL,
    mode        ENUM('read', 'write') NOT NULL,
    seq         BIGINT NOT NULL,
    expires_at  DATETIME(6) NOT NULL,
    acquired_at DATETIME(6) NULL,
    host        VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL,
    pid         BIGINT NULL,
    thread      VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL,
    fair        TINYINT NULL,
    PRIMARY KEY (name, token)
) ENGINE = InnoDB
""",
        )

    # Input: table (the entries table, unquoted). Output: one row, 1 if it has the fair
    # column (0: made by a tenure from before it).
    @functools.cached_property
    def fair_column(self) -> str:
        return (
            "SELECT COUNT(*) FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() "
            "AND TABLE_NAME = %(table)s AND COLUMN_NAME = 'fair'"
        )

    # No parameters. Adds the fair column at the end of the entries' rows (instant on MySQL
    # 8 and MariaDB 10.3+); a process that raced us fails with ER_DUP_FIELDNAME: done.
    @functools.cached_property
    def add_fair_column(self) -> str:
        return f"ALTER TABLE {self.entries} ADD COLUMN fair TINYINT NULL"

    # Inputs: name, token, ttl_us, queue_us, mode, host, pid, thread, fair. The whole acquire, one
    # transaction (see the module docstring):
    # 1. Takes the name's record lock (creating the record), reads the clock once.
    # 2. Drops the name's released entries, then its lapsed leases and places (how many:
    #    @tenure_dropped; a release already woke this process's waiters).
    # 3. The token's own live lease (@tenure_mine, its fence: a retry) or place
    #    (@tenure_place, its arrival position).
    # 4. Counts the live entries of others that block it (@tenure_blockers): for 'write'
    #    any lease or any place ahead; for 'read' a 'write' lease or a 'write' place ahead.
    #    "Ahead": arrived before the token's own place (all places when it has none). Also
    #    the microseconds left of the soonest-ending live lease of others (@tenure_soonest).
    # 5. A retry: the lease's expiry reset to now + ttl, fence kept. Else grantable: the
    #    record's fence + 1 (@tenure_granted), the token's place removed and its lease added.
    #    (The fence: max(the record's fence + 1, the clock in microseconds).)
    #    Else: its place's expiry reset to now + queue_ttl keeping its position, or a place
    #    at the tail (the record's arrivals + 1).
    # Output: its one result set, one row (retried fence, granted fence, soonest
    # microseconds, entries dropped); at most one of the fences is not NULL.
    @functools.cached_property
    def acquire(self) -> str:
        records, entries = self.records, self.entries
        return f"""
START TRANSACTION;
INSERT INTO {records} (name, fence, arrivals) VALUES (UNHEX(%(name)s), 0, 0)
ON DUPLICATE KEY UPDATE fence = fence;
SET @tenure_now = {NOW};
DELETE FROM {entries} WHERE {_NAME} AND expires_at <= {_AT} AND seq = 0;
DELETE FROM {entries} WHERE {_NAME} AND expires_at <= {_AT};
SET @tenure_dropped = ROW_COUNT();
SELECT MAX(IF(entry = 'lease', seq, NULL)), MAX(IF(entry = 'place', seq, NULL))
FROM {entries} WHERE {_MINE} AND expires_at > {_AT}
INTO @tenure_mine, @tenure_place;
SELECT COALESCE(SUM(token <> %(token)s AND (%(mode)s = 'write' OR mode = 'write')
                    AND (entry = 'lease' OR @tenure_place IS NULL OR seq < @tenure_place)), 0),
       TIMESTAMPDIFF(MICROSECOND, {_AT},
                     MIN(IF(entry = 'lease' AND token <> %(token)s, expires_at, NULL)))
FROM {entries} WHERE {_NAME} AND expires_at > {_AT}
INTO @tenure_blockers, @tenure_soonest;
SELECT IF(@tenure_mine IS NULL AND @tenure_blockers = 0, {_FLOORED}, NULL),
       IF(@tenure_mine IS NULL AND @tenure_blockers > 0 AND @tenure_place IS NULL,
          arrivals + 1, NULL)
FROM {records} WHERE {_NAME}
INTO @tenure_granted, @tenure_arrival;
UPDATE {entries} SET expires_at = {_AT} + INTERVAL %(ttl_us)s MICROSECOND
WHERE {_MINE} AND @tenure_mine IS NOT NULL;
UPDATE {entries} SET expires_at = {_AT} + INTERVAL %(queue_us)s MICROSECOND
WHERE {_MINE} AND @tenure_mine IS NULL AND @tenure_granted IS NULL
  AND @tenure_place IS NOT NULL;
UPDATE {records}
SET fence = COALESCE(@tenure_granted, fence), arrivals = COALESCE(@tenure_arrival, arrivals)
WHERE {_NAME} AND COALESCE(@tenure_granted, @tenure_arrival) IS NOT NULL;
DELETE FROM {entries} WHERE {_MINE} AND @tenure_granted IS NOT NULL;
INSERT INTO {entries}
    (name, token, entry, mode, seq, expires_at, acquired_at, host, pid, thread, fair)
SELECT UNHEX(%(name)s), %(token)s, IF(@tenure_granted IS NULL, 'place', 'lease'), %(mode)s,
       COALESCE(@tenure_granted, @tenure_arrival),
       {_AT} + INTERVAL IF(@tenure_granted IS NULL, %(queue_us)s, %(ttl_us)s) MICROSECOND,
       {_AT}, %(host)s, %(pid)s, %(thread)s, %(fair)s
FROM DUAL WHERE COALESCE(@tenure_granted, @tenure_arrival) IS NOT NULL;
COMMIT;
SELECT @tenure_mine, @tenure_granted, @tenure_soonest, @tenure_dropped
"""

    # Inputs: name, token. Ends the token's lease or place (lapsed now, seq 0: see the
    # module docstring), each statement on its own (autocommit). Output: one result set, one
    # row: 1 if it ended a live lease, else 0. The first UPDATE alone decides the answer; the
    # second ends a place, or marks a lapsed lease released.
    @functools.cached_property
    def release(self) -> str:
        return f"""
UPDATE {self.entries} SET expires_at = {NOW}, seq = 0
WHERE {_MINE} AND entry = 'lease' AND expires_at > {NOW};
SET @tenure_released = ROW_COUNT();
UPDATE {self.entries} SET expires_at = LEAST(expires_at, {NOW}), seq = 0 WHERE {_MINE};
SELECT @tenure_released
"""

    # One pass of the clean-up (see the module docstring and ``_sweep_sql``), one
    # transaction. Output: the `sweep_answer` row, with the records deleted.
    @functools.cached_property
    def collect(self) -> str:
        records, entries = self.records, self.entries
        return sweeping_records(records, f"""
        SELECT r.name FROM {records} AS r
        WHERE {SWEEP_BATCH.replace("name", "r.name")} AND NOT EXISTS (
            SELECT 1 FROM {entries} AS e WHERE e.name = r.name AND e.expires_at > {CUTOFF}
        )
        GROUP BY r.name
    """, tidy=f"DELETE FROM {entries} WHERE {SWEEP_BATCH} AND expires_at <= {CUTOFF};")

    # One row per live lease, oldest grant first, then one per live place in arrival order
    # (or one row of NULL entry columns for a record with neither), each with the record's
    # name, fence and live places; one consistent read, blocking no writer. Columns: name,
    # fence, queued, mode, host, pid, thread, acquired_at (a place's: when it was taken),
    # microseconds left, lease fence (a place's arrival), fair, entry. NOW is read when the
    # statement starts and the read's snapshot is taken after it: a release committed in
    # between ended its entry at a later NOW, so seq 0 (as for ``extend``) marks it ended
    # (``tenure verify --rwlock`` saw such a writer listed with fence 0).
    def _info(self, where: str) -> str:
        records, entries = self.records, self.entries
        return f"""
SELECT r.name, r.fence,
       (SELECT COUNT(*) FROM {entries} AS p
        WHERE p.name = r.name AND p.entry = 'place' AND p.expires_at > {NOW} AND p.seq > 0),
       l.mode, l.host, l.pid, l.thread, l.acquired_at,
       TIMESTAMPDIFF(MICROSECOND, {NOW}, l.expires_at), l.seq, l.fair, l.entry
FROM {records} AS r
LEFT JOIN {entries} AS l ON l.name = r.name AND l.expires_at > {NOW} AND l.seq > 0
WHERE {where}
ORDER BY r.name, l.entry, l.seq
"""

    @functools.cached_property
    def inspect(self) -> str:
        return self._info("r.name = UNHEX(%(name)s)")

    # Inputs: see ``_sql.starts_with``.
    @functools.cached_property
    def listing(self) -> str:
        return self._info(starts_with("r.name"))
