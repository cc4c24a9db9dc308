"""The SQL of MySQL/MariaDB semaphores, with each statement's contract above it.

One table beside the lock table, ``{table}_slots``, keyed (name, slot). Slot 0 is the
semaphore's record: its fence counter (the last fence granted), its limit, and in
``expires_at`` the queue's horizon: the latest expiry any place was given (none live after
it; NULL: no place ever).
Slots 1..limit hold one permit each, reused in place: token, expiry, holder, the permit's
fence and its ``weight`` (the units of the limit it takes; NULL, on a row an older tenure
wrote, reads as 1); a free slot has no token. Live permits' weights add up to at most the
limit, so at most ``limit`` of them are live and slots 1..limit always hold them. Slots below
0 are the queue: a waiting place per refused blocking permit, its slot -1 for the first
arrival, -2 for the next and so on (arrival order is slot descending), with the waiter's
token, the place's expiry (its queue lease, refreshed by each try), when it was taken
(``acquired_at``), the waiter's details and weight. Every permit statement asks for
``slot > 0``, so an older tenure sharing the table never sees a place.

The common grant is COMMON_GRANT, ONE statement, tried first by a permit of weight 1: a
multi-row ``INSERT ... ON DUPLICATE KEY UPDATE`` that visits the name's rows in a fixed
order: the record, slots 1..limit (pass 1), the record, slots 1..limit (pass 2), the record.
Rows are processed one after another in the order of the VALUES list, each one inserted if
absent (the first acquire creates the record and the slots) or else locked and updated by
the ``ON DUPLICATE KEY UPDATE`` part. The first row takes the record's row lock, as ACQUIRE
does, so the two never interleave. What one row's update learnt travels to the next row in
``LAST_INSERT_ID(expr)``, the session's value that a later expression of the same statement
reads back with ``LAST_INSERT_ID()`` and that the server returns to the client in the OK
packet (PyMySQL's ``cursor.lastrowid``), as the lock's acquire does (see ``_sql``). It is a
state: ``value * 8 + phase``:

- ``START`` (7, value 0): set by the first record row's VALUES list; if the record was absent
  it stays (a new semaphore: fence 0, every slot free, as pass 1 reads it);
- ``PASS1`` (0, value = the record's fence): the first record row found the record, its
  limit equal to ours and the queue's horizon passed (no place can be live). Pass 1 looks
  for a live permit of our token (a retried acquire), and meets every live permit: one of
  weight above 1 defers;
- ``PASS2`` (1, value = the record's fence): set by the middle record row's VALUES list if
  pass 1 found none. Pass 2 takes the first free or expired slot: its fence becomes value + 1
  (every live permit weighs 1 and nobody waits: a free slot is a free unit, and the rule
  holds);
- ``GRANTED`` (2, value = the new fence): the last record row stores it as the record's fence;
- ``MINE`` (3, value = our permit's fence): a retry; that slot's expiry and holder were reset;
- ``DEFER`` (4): another stored limit, a queue that may be live, or a heavier live permit.
  Nothing was written; ACQUIRE decides (as it does when every slot is live: ``PASS2``);
- ``CLAIMING`` (5) and ``RETRYING`` (6), within one slot row's update only: its first
  assignment judged the row as found (pass 2 and free or expired: we take it; pass 1 and our
  live permit: we restart it), the next assignments act on that, and its last one sets
  ``GRANTED`` or ``MINE``.

Each row's update reads the state once per column (the columns are assigned left to right,
each seeing the ones already assigned: the connection pins ``sql_mode`` so MariaDB's
SIMULTANEOUS_ASSIGNMENT can't change that); the first assignment, ``acquired_at``, may set
a slot row's transient phase and the last, ``permits``, writes the next state. Only the
VALUES lists of the first and middle record rows set the state too: VALUES are evaluated for
every row before the duplicate is found, so an absent row's VALUES say what happens to a new
row, and an existing row's update has the last word.

Every other acquire is ACQUIRE: one short transaction whose statements travel as one text (the
connections allow multi-statement texts), so the whole decision costs one round trip, as a
read-write lock's does (see ``_rwlock_sql``). It first upserts the name's record row, which
takes its row lock until the commit (concurrent acquirers of the name queue there); under
READ COMMITTED every later statement reads a fresh snapshot, so it sees every permit and
place committed before that lock was ours. It reads the server's clock ONCE
(``@tenure_now``), drops the lapsed places, and grants iff the units of the live permits
plus the weights of the live places ahead of this token's (every live place, for a token
without one) plus its weight stay within the limit: a newcomer stands behind every waiter,
and a heavy waiter at the head holds back the lighter ones behind it until it fits.
Refused, a blocking attempt (``queue_us`` given) keeps its place or takes one at the tail,
and pushes the record's queue horizon to that place's expiry at least.

Rows are only ever added and places dropped by the two grants, under the record's lock. The single
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
    LEASE_END,
    NOW,
    LeaseStatements,
    floor_fence,
    starts_with,
)
from tenure.backends.mysql._sweep_sql import SWEEP_BATCH, sweeping_records

__all__ = ["DEFER", "GRANTED", "MINE", "SemaphoreStatements"]

START, PASS1, PASS2, GRANTED, MINE, DEFER, CLAIMING, RETRYING = 7, 0, 1, 2, 3, 4, 5, 6
"""Phases of the common grant's state (``MOD(LAST_INSERT_ID(), 8)``); see the module
docstring. CLAIMING and RETRYING last only within one slot row's update."""

_STATE = "LAST_INSERT_ID()"
_PHASE = f"MOD({_STATE}, 8)"
_VALUE = f"({_STATE} DIV 8)"
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

    # Inputs: name, token, ttl_us, limit, host, pid, thread. The common grant of a permit of
    # weight 1, one statement (see the module docstring). Output: the insert id, the final
    # state: GRANTED or MINE with the permit's fence; PASS2: every slot is live; DEFER:
    # another stored limit, a queue that may be live, or a heavier live permit (nothing
    # written either way: the caller decides with ``acquire``). The text depends on the
    # limit (it lists the slots), so one is built per limit.
    def common_grant(self, limit: int) -> str:
        return _common_grant(self.quoted, limit)

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
    #    place at the tail, and the record's queue horizon (its ``expires_at``) pushed to
    #    that expiry at least. Our limit is stored unless another one rules.
    #    The grant is decided once a slot for it is found (granted implies a slot: never a
    #    grant with nowhere to write it), and every ``SELECT ... INTO`` is an aggregate, so
    #    it assigns even where it finds no row: one that finds none leaves the variable as
    #    the connection's previous acquire left it. CI once failed an insert of a NULL slot
    #    (1048) in a 32-thread race for fresh semaphores, which no rerun reproduced; with
    #    this order a grant the reads cannot place is a refusal (tried again), never a
    #    write. The slot itself is written only if it is still free or expired (or still
    #    not made) as the write finds it, and the grant stands only if it wrote: a read that
    #    missed a committed grant (which the record's lock rules out) makes a refusal
    #    (@tenure_collided, logged by the client), never an overwrite of a live permit. CI
    #    once counted 4 winners of 3 permits in the 32-thread race for fresh semaphores;
    #    no rerun reproduced it and its cause is not known, so the one write of the
    #    transaction that could over-grant no longer trusts the reads before it.
    # Output: its one result set, one row (retried fence, granted fence, soonest
    # microseconds, places dropped, the ruling stored limit, 1 if the chosen slot was found
    # taken); at most one of the fences and the limit is not NULL.
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
SELECT MAX(IF(@tenure_mine IS NULL AND @tenure_live > 0 AND NOT permits <=> %(limit)s,
              permits, NULL))
FROM {slots} WHERE {_NAME} AND slot = 0
INTO @tenure_mismatch;
SELECT IF(@tenure_mine IS NULL AND @tenure_mismatch IS NULL
          AND @tenure_units + @tenure_ahead + %(weight)s <= %(limit)s, COALESCE(
    (SELECT MIN(slot) FROM {slots}
     WHERE {_NAME} AND slot BETWEEN 1 AND %(limit)s
       AND (token IS NULL OR expires_at <= {_AT})),
    (SELECT MIN(a.slot) + 1 FROM {slots} AS a
     WHERE a.name = UNHEX(%(name)s) AND a.slot BETWEEN 0 AND %(limit)s - 1
       AND NOT EXISTS (SELECT 1 FROM {slots} AS b
                       WHERE b.name = a.name AND b.slot = a.slot + 1))), NULL)
INTO @tenure_slot;
SELECT MAX(IF(@tenure_slot IS NOT NULL, {_FLOORED}, NULL))
FROM {slots} WHERE {_NAME} AND slot = 0
INTO @tenure_granted;
UPDATE {slots} SET expires_at = {_AT} + INTERVAL %(ttl_us)s MICROSECOND
WHERE {_NAME} AND slot = @tenure_mine_slot AND {_OURS};
UPDATE {slots}
SET fence = @tenure_granted, token = %(token)s,
    expires_at = {_AT} + INTERVAL %(ttl_us)s MICROSECOND, acquired_at = {_AT},
    host = %(host)s, pid = %(pid)s, thread = %(thread)s, weight = %(weight)s
WHERE {_NAME} AND slot = @tenure_slot AND @tenure_granted IS NOT NULL
  AND (token IS NULL OR expires_at <= {_AT});
SET @tenure_wrote = ROW_COUNT();
INSERT INTO {slots}
    (name, slot, fence, permits, token, expires_at, acquired_at, host, pid, thread, weight)
SELECT UNHEX(%(name)s), @tenure_slot, @tenure_granted, NULL, %(token)s,
       {_AT} + INTERVAL %(ttl_us)s MICROSECOND, {_AT}, %(host)s, %(pid)s, %(thread)s,
       %(weight)s
FROM DUAL WHERE @tenure_granted IS NOT NULL AND @tenure_wrote = 0
  AND NOT EXISTS (SELECT 1 FROM {slots} WHERE {_NAME} AND slot = @tenure_slot);
SET @tenure_collided = @tenure_granted IS NOT NULL AND @tenure_wrote + ROW_COUNT() = 0;
SET @tenure_granted = IF(@tenure_collided, NULL, @tenure_granted);
UPDATE {slots}
SET fence = COALESCE(@tenure_granted, fence),
    permits = IF(@tenure_mine IS NULL AND @tenure_mismatch IS NULL, %(limit)s, permits),
    expires_at = IF({_REFUSED} AND %(queue_us)s IS NOT NULL,
                    GREATEST(COALESCE(expires_at, {_AT}),
                             {_AT} + INTERVAL %(queue_us)s MICROSECOND),
                    expires_at)
WHERE {_NAME} AND slot = 0;
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
SELECT @tenure_mine, @tenure_granted, @tenure_soonest, @tenure_dropped, @tenure_mismatch,
       @tenure_collided
"""

    # Inputs: name, token. After a release that ended no permit: gives up the token's place
    # (an attempt that stops waiting), each statement on its own (autocommit). Output: one
    # result set, one row: the places removed. The place is found by a plain read and
    # deleted by its key: a locking scan of the places would lock the record row past them
    # (an acquire's, which may want this place: a deadlock).
    @functools.cached_property
    def leave(self) -> str:
        return f"""
SELECT MAX(slot) FROM {self.quoted} WHERE {_PLACES} AND {_OURS} INTO @tenure_leaving;
DELETE FROM {self.quoted} WHERE {_NAME} AND slot = @tenure_leaving AND {_OURS};
SELECT ROW_COUNT()
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


# A slot row's update decides once, in its first assignment, what it does to the row as
# found, and notes it in the state's phase for the row's other assignments to test (a few
# items each instead of the whole condition again: the update part runs on every row the
# statement visits, and its evaluation was most of the acquire's cost); the row's last
# assignment replaces that phase with the next state.
_CLAIM = f"(slot > 0 AND {_PHASE} = {PASS2} AND (token IS NULL OR expires_at <= {NOW}))"
"""Pass 2 and this slot is free or expired: take it."""
_RETRY = f"(slot > 0 AND {_PHASE} IN ({START}, {PASS1}) AND {_OURS} AND expires_at > {NOW})"
"""Pass 1 and this slot holds our live permit."""
_ACTION = f"""CASE
    WHEN {_CLAIM} THEN {_VALUE} * 8 + {CLAIMING}
    WHEN {_RETRY} THEN {_VALUE} * 8 + {RETRYING}
    ELSE {_STATE} END"""
"""The state for the rest of this row's assignments (the value, the record's fence, kept)."""
_ACTING = f"{_PHASE} IN ({CLAIMING}, {RETRYING})"
_NEXT = f"""CASE
    WHEN slot = 0 AND {_PHASE} = {START}
        THEN IF(permits <=> %(limit)s AND (expires_at IS NULL OR expires_at <= {NOW}),
                fence * 8 + {PASS1}, {DEFER})
    WHEN {_PHASE} = {CLAIMING} THEN fence * 8 + {GRANTED}
    WHEN {_PHASE} = {RETRYING} THEN fence * 8 + {MINE}
    WHEN slot > 0 AND {_PHASE} = {PASS1} AND weight > 1 AND {_LIVE_ROW} THEN {DEFER}
    ELSE {_STATE} END"""
"""The next state, computed last, on the row as updated: the first record row reads the
counter, checks the limit and that no place may be live (the record's queue horizon has
passed); a live permit of weight above 1 met in pass 1 sends the grant to the transaction;
a slot taken in pass 2 carries its new fence; a retried permit its own fence."""


@functools.lru_cache(maxsize=64)
def _common_grant(quoted: str, limit: int) -> str:
    new_slot = "(UNHEX(%(name)s), {slot}, 0, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)"
    first = f"(UNHEX(%(name)s), 0, LAST_INSERT_ID({START}) - {START}, %(limit)s, " \
        "NULL, NULL, NULL, NULL, NULL, NULL, NULL)"
    middle = (
        f"(UNHEX(%(name)s), 0, 0 * LAST_INSERT_ID(IF({_PHASE} IN ({START}, {PASS1}), "
        f"{_VALUE} * 8 + {PASS2}, {_STATE})), %(limit)s, NULL, NULL, NULL, NULL, NULL, NULL, "
        "NULL)"
    )
    last = "(UNHEX(%(name)s), 0, 0, %(limit)s, NULL, NULL, NULL, NULL, NULL, NULL, NULL)"
    slots = [new_slot.format(slot=slot) for slot in range(1, limit + 1)]
    rows = ",\n".join([first, *slots, middle, *slots, last])
    return f"""
INSERT INTO {quoted} (name, slot, fence, permits, token, expires_at, acquired_at, host, pid,
                      thread, weight)
VALUES {rows}
ON DUPLICATE KEY UPDATE
    acquired_at = IF(MOD(LAST_INSERT_ID({_ACTION}), 8) = {CLAIMING}, {NOW}, acquired_at),
    fence = IF({_PHASE} = {CLAIMING}, {floor_fence(_VALUE)},
               IF(slot = 0 AND {_PHASE} = {GRANTED}, {_VALUE}, fence)),
    token = IF({_PHASE} = {CLAIMING}, %(token)s, token),
    expires_at = IF({_ACTING}, {LEASE_END}, expires_at),
    host = IF({_ACTING}, %(host)s, host),
    pid = IF({_ACTING}, %(pid)s, pid),
    thread = IF({_ACTING}, %(thread)s, thread),
    weight = IF({_PHASE} = {CLAIMING}, 1, weight),
    permits = IF(LAST_INSERT_ID({_NEXT}) IS NULL, NULL, permits)
"""
