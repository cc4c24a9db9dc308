"""The SQL of MySQL/MariaDB semaphores, with each statement's contract above it.

One table beside the lock table, ``{table}_slots``, keyed (name, slot). Slot 0 is the
semaphore's record: its fence counter (the last fence granted) and its limit, no expiry.
Slots 1..limit hold one permit each, reused in place: token, expiry, holder, the permit's
fence and its ``weight`` (the units of the limit it takes; NULL, on a row an older tenure
wrote, reads as 1); a free slot has no token. Live permits' weights add up to at most the
limit, so at most ``limit`` of them are live and slots 1..limit always hold them. Slots below
0 are the queue: a waiting place per refused blocking permit, its slot -1 for the first
arrival, -2 for the next and so on (arrival order is slot descending), with the waiter's
token, the place's expiry (its queue lease, refreshed by each try), when it was taken
(``acquired_at``), the waiter's details and weight. Every permit statement asks for
``slot > 0``, so an older tenure sharing the table never sees a place.

An acquire is ACQUIRE: one short transaction whose statements travel as one text (the
connections allow multi-statement texts), so the whole decision costs one round trip, as a
read-write lock's does (see ``_rwlock_sql``). It first upserts the name's record row, which
takes its row lock until the commit (concurrent acquirers of the name queue there); under
READ COMMITTED every later statement reads a fresh snapshot, so it sees every permit and
place committed before that lock was ours. It reads the server's clock ONCE
(``@tenure_now``), drops the lapsed places, and grants iff the units of the live permits
plus the weights of the live places ahead of this token's (every live place, for a token
without one) plus its weight stay within the limit: a newcomer stands behind every waiter,
and a heavy waiter at the head holds back the lighter ones behind it until it fits.
Refused, a blocking attempt (``queue_us`` given) keeps its place or takes one at the tail.

Rows are only ever added and places dropped by ACQUIRE, under the record's lock. The single
statements that change rows without it (release, renewals, break, a place given up) only end
permits, delete places or push a live permit's expiry later, so they can make a decision
ACQUIRE took stale only in the safe direction (it queued where it could have been granted,
and tries again).

Fences are granted under the record's row lock from its counter and the server's clock,
max(counter + 1, the clock in microseconds) (``floor_fence``): strictly increasing per name,
in grant order, never reused (the counter stays when permits are freed or the limit
changes), and never going back when the clean-up removed the name's rows or the server lost
them. The stored limit rules while permits are live: another limit, with permits of other
tokens live, is refused (nothing written, the client raises); with none live, it is stored.

Clean-up (``gc_after``, ``collect``): a freed slot keeps in ``expires_at`` when its permit
ended, so a name whose slots and places all ended before now - gc_after is idle that long.
One pass, one transaction over the names of at most ``batch`` rows in key order: it locks
their record rows first (as every acquire does, so no acquire of those names runs meanwhile
and none waits in between: same order, no deadlock), then deletes every row of the names that
are idle in a fresh read. A name created while the pass ran is not in that read, and stays.

A table made before the weight column gets it in place (``add_weight_column``, at the first
use of the table by this tenure). An older tenure still acquiring on the same table grants
by its own rule (every permit one unit, no queue): weighted permits want every process on a
tenure that has them.
"""

from __future__ import annotations

import dataclasses
import functools

from tenure.backends.mysql._sql import (
    CUTOFF,
    FREE,
    NOW,
    LeaseStatements,
    floor_fence,
    starts_with,
)
from tenure.backends.mysql._sweep_sql import SWEEP_BATCH, sweeping_records

__all__ = ["SemaphoreStatements"]

_NAME = "name = UNHEX(%(name)s)"
_OURS = "token <=> %(token)s"
_LIVE_ROW = f"token IS NOT NULL AND expires_at > {NOW}"
_THIS = f"{_NAME} AND slot > 0"
_LIVE = f"{_THIS} AND {_LIVE_ROW}"
_AT = "CAST(@tenure_now AS DATETIME(6))"
"""The acquire's one instant. A user variable keeps a DATETIME as text: cast back, so every
comparison and sum is a DATETIME one."""
_FLOORED = floor_fence("fence").replace(NOW, _AT)
"""A grant's fence, by the acquire's one instant."""
_UNITS = "COALESCE(SUM(COALESCE(weight, 1)), 0)"
"""The units of the rows summed (a row from before the weight column takes one)."""
_PLACES = f"{_NAME} AND slot < 0"
_REFUSED = "@tenure_granted IS NULL AND @tenure_mine IS NULL AND @tenure_mismatch IS NULL"
"""The acquire was refused for want of units (not a retry, not another limit)."""


@dataclasses.dataclass(frozen=True)
class SemaphoreStatements(LeaseStatements):
    """The slots' statements; extend, owned and breaking are ``LeaseStatements``' (a slot's
    permit is a lease row), the release its own (it gives up a place too)."""

    table: str
    """The lock table's validated name; the slots table is named after it."""

    @functools.cached_property
    def quoted(self) -> str:
        return f"`{self.table[:58]}_slots`"

    @property
    def leases(self) -> str:
        return self.quoted

    @property
    def mine(self) -> str:
        return f"{_LIVE} AND {_OURS}"

    @property
    def live(self) -> str:
        return _LIVE

    @property
    def ended(self) -> str:
        return FREE

    @functools.cached_property
    def create(self) -> str:
        return f"""
CREATE TABLE IF NOT EXISTS {self.quoted} (
    name        VARBINARY(1024) NOT NULL,
    slot        INT NOT NULL,
    fence       BIGINT NOT NULL,
    permits     INT NULL,
    token       VARBINARY(255) NULL,
    expires_at  DATETIME(6) NULL,
    acquired_at DATETIME(6) NULL,
    host        VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL,
    pid         BIGINT NULL,
    thread      VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL,
    weight      INT NULL,
    PRIMARY KEY (name, slot)
) ENGINE = InnoDB
"""

    # Input: table (the slots table, unquoted). Output: one row, 1 if it has the weight
    # column (0: made by a tenure from before it).
    @functools.cached_property
    def weight_column(self) -> str:
        return (
            "SELECT COUNT(*) FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() "
            "AND TABLE_NAME = %(table)s AND COLUMN_NAME = 'weight'"
        )

    # No parameters. Adds the weight column at the end of the rows (instant on MySQL 8 and
    # MariaDB 10.3+; every row already there reads as weight 1); a process that raced us
    # fails with ER_DUP_FIELDNAME: done.
    @functools.cached_property
    def add_weight_column(self) -> str:
        return f"ALTER TABLE {self.quoted} ADD COLUMN weight INT NULL"

    # Inputs: name, token, ttl_us, queue_us (NULL: a try that keeps no place), limit, weight,
    # host, pid, thread. The whole acquire, one transaction (see the module docstring):
    # 1. Takes the name's record lock (creating the record with our limit), reads the clock
    #    once, drops the lapsed places (how many: @tenure_dropped).
    # 2. The token's own live permit (@tenure_mine, its fence: a retry) or place
    #    (@tenure_place, its slot).
    # 3. The live permits: how many, their units, the microseconds left of the soonest to
    #    end (@tenure_live, @tenure_units, @tenure_soonest); the weights of the live places
    #    ahead (@tenure_ahead) and the slot of a new place at the tail (@tenure_arrival,
    #    meaningful when the token has no place: then every place is "ahead").
    # 4. Another stored limit with live permits (of other tokens): @tenure_mismatch, the
    #    stored limit; nothing is written.
    # (The token's own rows are written by their keys, so the transaction locks no place of
    # another waiter but a lapsed one.)
    # 5. A retry: the permit's expiry reset to now + ttl, fence kept. Else grantable (units +
    #    ahead + weight <= limit): the record's fence + 1 (@tenure_granted; in fact max(the
    #    record's fence + 1, the clock in microseconds)) in the first slot of 1..limit that
    #    is free, expired or not made yet (@tenure_slot), the token's place removed. Else,
    #    blocking: its place's expiry reset to now + queue_ttl keeping its position, or a
    #    place at the tail. Our limit is stored unless another one rules.
    # Output: its one result set, one row (retried fence, granted fence, soonest
    # microseconds, places dropped, the ruling stored limit); at most one of the fences and
    # the limit is not NULL.
    @functools.cached_property
    def acquire(self) -> str:
        slots = self.quoted
        return f"""
START TRANSACTION;
INSERT INTO {slots} (name, slot, fence, permits) VALUES (UNHEX(%(name)s), 0, 0, %(limit)s)
ON DUPLICATE KEY UPDATE fence = fence;
SET @tenure_now = {NOW};
DELETE FROM {slots} WHERE {_PLACES} AND expires_at <= {_AT};
SET @tenure_dropped = ROW_COUNT();
SELECT MAX(IF(slot > 0, fence, NULL)), MAX(IF(slot > 0, slot, NULL)),
       MAX(IF(slot < 0, slot, NULL))
FROM {slots} WHERE {_NAME} AND slot <> 0 AND {_OURS} AND expires_at > {_AT}
INTO @tenure_mine, @tenure_mine_slot, @tenure_place;
SELECT COUNT(*), {_UNITS}, TIMESTAMPDIFF(MICROSECOND, {_AT}, MIN(expires_at))
FROM {slots} WHERE {_THIS} AND token IS NOT NULL AND expires_at > {_AT}
INTO @tenure_live, @tenure_units, @tenure_soonest;
SELECT {_UNITS}, LEAST(COALESCE(MIN(slot), 0), 0) - 1
FROM {slots} WHERE {_PLACES} AND (@tenure_place IS NULL OR slot > @tenure_place)
INTO @tenure_ahead, @tenure_arrival;
SELECT IF(@tenure_mine IS NULL AND @tenure_live > 0 AND NOT permits <=> %(limit)s,
          permits, NULL)
FROM {slots} WHERE {_NAME} AND slot = 0
INTO @tenure_mismatch;
SELECT IF(@tenure_mine IS NULL AND @tenure_mismatch IS NULL
          AND @tenure_units + @tenure_ahead + %(weight)s <= %(limit)s, {_FLOORED}, NULL)
FROM {slots} WHERE {_NAME} AND slot = 0
INTO @tenure_granted;
SELECT IF(@tenure_granted IS NULL, NULL, COALESCE(
    (SELECT MIN(slot) FROM {slots}
     WHERE {_NAME} AND slot BETWEEN 1 AND %(limit)s
       AND (token IS NULL OR expires_at <= {_AT})),
    (SELECT MIN(a.slot) + 1 FROM {slots} AS a
     WHERE a.name = UNHEX(%(name)s) AND a.slot BETWEEN 0 AND %(limit)s - 1
       AND NOT EXISTS (SELECT 1 FROM {slots} AS b
                       WHERE b.name = a.name AND b.slot = a.slot + 1))))
INTO @tenure_slot;
UPDATE {slots} SET expires_at = {_AT} + INTERVAL %(ttl_us)s MICROSECOND
WHERE {_NAME} AND slot = @tenure_mine_slot AND {_OURS};
UPDATE {slots}
SET fence = COALESCE(@tenure_granted, fence),
    permits = IF(@tenure_mine IS NULL AND @tenure_mismatch IS NULL, %(limit)s, permits)
WHERE {_NAME} AND slot = 0;
INSERT INTO {slots}
    (name, slot, fence, permits, token, expires_at, acquired_at, host, pid, thread, weight)
SELECT UNHEX(%(name)s), @tenure_slot, @tenure_granted, NULL, %(token)s,
       {_AT} + INTERVAL %(ttl_us)s MICROSECOND, {_AT}, %(host)s, %(pid)s, %(thread)s,
       %(weight)s
FROM DUAL WHERE @tenure_granted IS NOT NULL
ON DUPLICATE KEY UPDATE fence = @tenure_granted, token = %(token)s,
    expires_at = {_AT} + INTERVAL %(ttl_us)s MICROSECOND, acquired_at = {_AT},
    host = %(host)s, pid = %(pid)s, thread = %(thread)s, weight = %(weight)s;
DELETE FROM {slots}
WHERE {_NAME} AND slot = @tenure_place AND {_OURS} AND @tenure_granted IS NOT NULL;
UPDATE {slots}
SET expires_at = {_AT} + INTERVAL %(queue_us)s MICROSECOND, weight = %(weight)s
WHERE {_NAME} AND slot = @tenure_place AND {_REFUSED} AND %(queue_us)s IS NOT NULL;
INSERT INTO {slots}
    (name, slot, fence, permits, token, expires_at, acquired_at, host, pid, thread, weight)
SELECT UNHEX(%(name)s), @tenure_arrival, 0, NULL, %(token)s,
       {_AT} + INTERVAL %(queue_us)s MICROSECOND, {_AT}, %(host)s, %(pid)s, %(thread)s,
       %(weight)s
FROM DUAL WHERE {_REFUSED} AND @tenure_place IS NULL AND %(queue_us)s IS NOT NULL;
COMMIT;
SELECT @tenure_mine, @tenure_granted, @tenure_soonest, @tenure_dropped, @tenure_mismatch
"""

    # Inputs: name, token. Ends the token's live permit, or gives up its place (an attempt
    # that stops waiting), each statement on its own (autocommit). The place is found by a
    # plain read and deleted by its key: a locking scan of the places would lock the record
    # row past them (an acquire's, which may want this place: a deadlock). Output: one result set,
    # one row: (1 if it ended a live permit, else 0; the places removed).
    @functools.cached_property
    def release_or_leave(self) -> str:
        return f"""
{self.release};
SET @tenure_released = ROW_COUNT();
SELECT MAX(slot) FROM {self.quoted} WHERE {_PLACES} AND {_OURS} INTO @tenure_leaving;
DELETE FROM {self.quoted} WHERE {_NAME} AND slot = @tenure_leaving AND {_OURS};
SELECT @tenure_released, ROW_COUNT()
"""

    # One pass of the clean-up (see the module docstring and ``_sweep_sql``), one
    # transaction. Output: the `sweep_answer` row, with the rows deleted.
    @functools.cached_property
    def collect(self) -> str:
        return sweeping_records(self.quoted, f"""
        SELECT name FROM {self.quoted} WHERE {SWEEP_BATCH} GROUP BY name
        HAVING SUM(slot = 0) = 1 AND COALESCE(SUM(slot <> 0 AND expires_at > {CUTOFF}), 0) = 0
    """, order="name, slot", record=" AND slot = 0")

    # One row per live permit, oldest grant first, then one per live place in arrival order
    # (or one row of NULLs for a semaphore with neither), each with its semaphore's name,
    # fence and limit; one consistent read. Columns: name, fence, limit, host, pid, thread,
    # acquired_at (a place's: when it was taken), microseconds left, permit fence, weight,
    # slot (below 0: a place).
    def _info(self, where: str) -> str:
        return f"""
SELECT r.name, r.fence, r.permits, p.host, p.pid, p.thread, p.acquired_at,
       TIMESTAMPDIFF(MICROSECOND, {NOW}, p.expires_at), p.fence, COALESCE(p.weight, 1), p.slot
FROM {self.quoted} AS r
LEFT JOIN {self.quoted} AS p
  ON p.name = r.name AND p.slot <> 0 AND p.token IS NOT NULL AND p.expires_at > {NOW}
WHERE r.slot = 0 AND {where}
ORDER BY r.name, p.slot < 0, p.fence, p.slot DESC
"""

    @functools.cached_property
    def inspect(self) -> str:
        return self._info("r.name = UNHEX(%(name)s)")

    @functools.cached_property
    def listing(self) -> str:
        return self._info(starts_with("r.name"))
