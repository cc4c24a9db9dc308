"""The SQL of MySQL/MariaDB semaphores, with each statement's contract above it.

One table beside the lock table, ``{table}_slots``, keyed (name, slot). Slot 0 is the
semaphore's record: its fence counter (the last fence granted) and its limit, no expiry.
Slots 1..limit hold one permit each, reused in place: token, expiry, holder and the permit's
fence; a free slot has no token. So a release, an extend and an expiry are in-place updates of
one row, as a lock's are, and an acquire is ONE statement (below).

The acquire is a multi-row ``INSERT ... ON DUPLICATE KEY UPDATE`` that visits the name's rows
in a fixed order: the record, slots 1..limit (pass 1), the record, slots 1..limit (pass 2),
the record. Rows are processed one after another in the order of the VALUES list, each one
inserted if absent (the first acquire creates the record and the slots) or else locked and
updated by the ``ON DUPLICATE KEY UPDATE`` part. The row locks of the name (record first, then
slots in ascending order) are taken in the same order by every acquire and held until the
statement commits: concurrent acquirers of a name queue on the record row and never deadlock
with each other; a release, extend or break locks one row at a time or rows in the same
ascending order.

What one row's update learnt travels to the next row in ``LAST_INSERT_ID(expr)``, the
session's value that a later expression of the same statement reads back with
``LAST_INSERT_ID()`` and that the server returns to the client in the OK packet (PyMySQL's
``cursor.lastrowid``), as the lock's acquire does (see ``_sql``). It is a state: ``value * 8 +
phase``:

- ``START`` (7, value 0): set by the first record row's VALUES list; if the record was absent
  it stays (a new semaphore: fence 0, every slot free, as pass 1 reads it);
- ``PASS1`` (0, value = the record's fence): the first record row found the record and its
  limit equal to ours. Pass 1 looks for a live permit of our token (a retried acquire);
- ``PASS2`` (1, value = the record's fence): set by the middle record row's VALUES list if
  pass 1 found none. Pass 2 takes the first free or expired slot: its fence becomes value + 1;
- ``GRANTED`` (2, value = the new fence): the last record row stores it as the record's fence;
- ``MINE`` (3, value = our permit's fence): a retry; that slot's expiry and holder were reset;
- ``MISMATCH`` (4): the stored limit differs from ours. Nothing was written; the client
  decides in a short transaction (``LIMIT_*`` below) whether live permits forbid a change;
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

Fences are granted under the record's row lock from its counter and the server's clock,
max(counter + 1, the clock in microseconds) (``floor_fence``): strictly increasing per name,
in grant order, never reused (the counter stays when permits are freed or the limit
changes), and never going back when the clean-up removed the name's rows or the server lost
them.

Clean-up (``gc_after``, ``collect``): a freed slot keeps in ``expires_at`` when its permit
ended, so a name whose slots all ended before now - gc_after is idle that long. One pass, one
transaction over the names of at most ``batch`` rows in key order: it locks their record rows
first (as every acquire does, so no acquire of those names runs meanwhile and none waits in
between: same order, no deadlock), then deletes every row of the names that are idle in a
fresh read. A name created while the pass ran is not in that read, and stays.

Time is the server's ``UTC_TIMESTAMP(6)``, fixed for the whole statement. A slot above a
lowered limit keeps its row, never granted until the limit grows again.
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

__all__ = ["GRANTED", "MINE", "MISMATCH", "SemaphoreStatements"]

START, PASS1, PASS2, GRANTED, MINE, MISMATCH, CLAIMING, RETRYING = 7, 0, 1, 2, 3, 4, 5, 6
"""Phases of the acquire's state (``MOD(LAST_INSERT_ID(), 8)``); see the module docstring.
CLAIMING and RETRYING last only within one slot row's update."""

_STATE = "LAST_INSERT_ID()"
_PHASE = f"MOD({_STATE}, 8)"
_VALUE = f"({_STATE} DIV 8)"
_OURS = "token <=> %(token)s"
_LIVE_ROW = f"token IS NOT NULL AND expires_at > {NOW}"
_THIS = "name = UNHEX(%(name)s) AND slot > 0"
_LIVE = f"{_THIS} AND {_LIVE_ROW}"


@dataclasses.dataclass(frozen=True)
class SemaphoreStatements(LeaseStatements):
    """The slots' statements; release, extend, owned and breaking are ``LeaseStatements``'
    (a slot's permit is a lease row)."""

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
    PRIMARY KEY (name, slot)
) ENGINE = InnoDB
"""

    # Inputs: name, token, ttl_us, limit, host, pid, thread. The whole acquire, one statement
    # (see the module docstring). Output: the insert id, the final state: GRANTED or MINE
    # with the permit's fence; PASS2: every slot is live (refused, nothing written);
    # MISMATCH: the stored limit differs (nothing written). The text depends on the limit
    # (it lists the slots), so one is built per limit.
    def acquire(self, limit: int) -> str:
        return _acquire(self.quoted, limit)

    # Input: name. After a refused acquire (the contended path only): the microseconds left
    # of the soonest-ending live permit (NULL: none is live any more), for the waiter.
    @functools.cached_property
    def soonest(self) -> str:
        return f"SELECT TIMESTAMPDIFF(MICROSECOND, {NOW}, MIN(expires_at)) FROM {self.quoted} " \
            f"WHERE {_LIVE}"

    # Inputs: name, limit. For a MISMATCH, in one transaction with ``limit_count`` and
    # ``limit_store``: locks the record row (acquirers of the name wait), so the count of
    # live permits that follows cannot change under it but by expiry or release.
    @functools.cached_property
    def limit_lock(self) -> str:
        return (
            f"SELECT permits FROM {self.quoted} WHERE name = UNHEX(%(name)s) AND slot = 0 "
            f"FOR UPDATE"
        )

    # Inputs: name, token. Output: one row (live permits of other tokens, our own live
    # permit's fence or NULL), across every slot, above the limit too.
    @functools.cached_property
    def limit_count(self) -> str:
        return (
            f"SELECT COALESCE(SUM(NOT {_OURS}), 0), MAX(IF({_OURS}, fence, NULL)) "
            f"FROM {self.quoted} WHERE {_LIVE}"
        )

    # Inputs: name, limit. Stores a new limit (no other permit is live).
    @functools.cached_property
    def limit_store(self) -> str:
        return (
            f"UPDATE {self.quoted} SET permits = %(limit)s "
            f"WHERE name = UNHEX(%(name)s) AND slot = 0"
        )

    # One pass of the clean-up (see the module docstring and ``_sweep_sql``), one
    # transaction. Output: the `sweep_answer` row, with the rows deleted.
    @functools.cached_property
    def collect(self) -> str:
        return sweeping_records(self.quoted, f"""
        SELECT name FROM {self.quoted} WHERE {SWEEP_BATCH} GROUP BY name
        HAVING SUM(slot = 0) = 1 AND COALESCE(SUM(slot > 0 AND expires_at > {CUTOFF}), 0) = 0
    """, order="name, slot", record=" AND slot = 0")

    # One row per live permit (or one row of NULLs for a semaphore with none), each with its
    # semaphore's name, fence and limit; one consistent read.
    def _info(self, where: str) -> str:
        return f"""
SELECT r.name, r.fence, r.permits, p.host, p.pid, p.thread, p.acquired_at,
       TIMESTAMPDIFF(MICROSECOND, {NOW}, p.expires_at), p.fence
FROM {self.quoted} AS r
LEFT JOIN {self.quoted} AS p
  ON p.name = r.name AND p.slot > 0 AND p.token IS NOT NULL AND p.expires_at > {NOW}
WHERE r.slot = 0 AND {where}
ORDER BY r.name, p.fence
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
        THEN IF(permits <=> %(limit)s, fence * 8 + {PASS1}, {MISMATCH})
    WHEN {_PHASE} = {CLAIMING} THEN fence * 8 + {GRANTED}
    WHEN {_PHASE} = {RETRYING} THEN fence * 8 + {MINE}
    ELSE {_STATE} END"""
"""The next state, computed last, on the row as updated: the first record row reads the
counter and checks the limit; a slot taken in pass 2 carries its new fence; a retried
permit its own fence."""


@functools.lru_cache(maxsize=64)
def _acquire(quoted: str, limit: int) -> str:
    new_slot = "(UNHEX(%(name)s), {slot}, 0, NULL, NULL, NULL, NULL, NULL, NULL, NULL)"
    first = f"(UNHEX(%(name)s), 0, LAST_INSERT_ID({START}) - {START}, %(limit)s, " \
        "NULL, NULL, NULL, NULL, NULL, NULL)"
    middle = (
        f"(UNHEX(%(name)s), 0, 0 * LAST_INSERT_ID(IF({_PHASE} IN ({START}, {PASS1}), "
        f"{_VALUE} * 8 + {PASS2}, {_STATE})), %(limit)s, NULL, NULL, NULL, NULL, NULL, NULL)"
    )
    last = "(UNHEX(%(name)s), 0, 0, %(limit)s, NULL, NULL, NULL, NULL, NULL, NULL)"
    slots = [new_slot.format(slot=slot) for slot in range(1, limit + 1)]
    rows = ",\n".join([first, *slots, middle, *slots, last])
    return f"""
INSERT INTO {quoted} (name, slot, fence, permits, token, expires_at, acquired_at, host, pid,
                      thread)
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
    permits = IF(LAST_INSERT_ID({_NEXT}) IS NULL, NULL, permits)
"""
