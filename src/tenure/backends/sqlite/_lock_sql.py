"""The SQL of SQLite's plain locks (and elections: a lock whose lease carries a value), the
tables every kind shares (the waiters' queue, the clean-up's cursor) and the clean-up's
statements; flavour-free. See ``_store`` for the design."""

from __future__ import annotations

from tenure.backends.sqlite._clock import CLOCK_US, NOW

SCHEMA_VERSION = 2
"""2: records are deleted when idle (``gc_after``) and fences are floored at the clock. A
tenure of schema 1 refuses the file: it would restart a collected name's fences at 1."""


CREATE_TABLE = """
CREATE TABLE IF NOT EXISTS tenure_locks (
    name        TEXT PRIMARY KEY NOT NULL,
    fence       INTEGER NOT NULL,
    token       TEXT,
    expires_at  REAL,
    acquired_at REAL,
    host        TEXT,
    pid         INTEGER,
    thread      TEXT,
    value       TEXT,
    value_token TEXT
) WITHOUT ROWID
"""

# An election leader's value lives in its lease row. ``value_token`` is the token that wrote
# it: a value counts only while that token holds the row, so a tenure from before these
# columns, which neither sets nor clears them, can never make a stale value look current.
# Added to an older file in place (plain nullable columns, the schema version unchanged):
# older tenure processes keep working on the same file.
VALUE_COLUMNS = (("value", "TEXT"), ("value_token", "TEXT"))

# The queue of waiting acquires, per primitive (``kind``: "lock" today; a queued primitive
# such as a fair read-write lock adds its own kind, and a column for its mode, in place). seq
# is the arrival order within (kind, name): max + 1 at arrival. expires_at is the place's own
# lease, by SQLite's clock: a waiter that stops refreshing it (killed, stalled longer than
# PLACE_TTL) stops blocking the waiters behind it. wake is the waiting process's doorbell.
WAITERS_TABLE = """
CREATE TABLE IF NOT EXISTS tenure_waiters (
    kind       TEXT NOT NULL,
    name       TEXT NOT NULL,
    seq        INTEGER NOT NULL,
    token      TEXT NOT NULL UNIQUE,
    expires_at REAL NOT NULL,
    wake       TEXT,
    PRIMARY KEY (kind, name, seq)
) WITHOUT ROWID
"""

# The clean-up's cursor per record table (``kind``: lock, semaphore, rwlock): the last name the
# previous pass looked at, '' to start from the first. Shared by every process of the file.
SWEEP_TABLE = """
CREATE TABLE IF NOT EXISTS tenure_sweep (
    kind  TEXT PRIMARY KEY NOT NULL,
    after TEXT NOT NULL
) WITHOUT ROWID
"""

PLACE_TTL = 2.0
"""Seconds a waiter's place lasts without a refresh. Its attempts refresh it at least every
``max_backoff`` (0.25 s), so only a waiter that died or stalled for seconds loses it."""

NOT_QUEUED = 2**63 - 1
"""The :seq of an acquire that holds no place: every live waiter is ahead of it."""

# Inputs :name :seq. A live waiter arrived before seq: a free lock is theirs, not ours. An
# index seek into an empty range when nobody waits, the uncontended case.
AHEAD = f"""EXISTS (SELECT 1 FROM tenure_waiters AS w
    WHERE w.kind = 'lock' AND w.name = :name AND w.seq < :seq AND w.expires_at > {NOW})"""

# Inputs :name :token :ttl :host :pid :thread :value (NULL for a lock) :seq (the caller's place,
# NOT_QUEUED if none). Takes the lock if the row is absent, or free or expired with no live
# waiter ahead of the caller, or already ours (a retried acquire); the fence becomes
# max(fence + 1, the clock floor) unless the lock was already ours (a retry keeps its fence,
# and the value it stored). The floor is read by SQLite (CLOCK_US), so that the statement can
# be a transaction of its own (the uncontended acquire) and still read it under the write
# lock. RETURNING yields the fence when granted and no row when held by another token (or kept
# for a waiter ahead). In an upsert's SET, column names mean the old row; excluded.* the
# proposed one.
ACQUIRE = f"""
INSERT INTO tenure_locks
    (name, fence, token, expires_at, acquired_at, host, pid, thread, value, value_token)
VALUES (:name, {CLOCK_US}, :token, {NOW} + :ttl, {NOW}, :host, :pid, :thread, :value, :token)
ON CONFLICT (name) DO UPDATE SET
    fence = CASE WHEN token IS excluded.token THEN fence ELSE max(fence + 1, excluded.fence) END,
    acquired_at = CASE WHEN token IS excluded.token THEN acquired_at
                       ELSE excluded.acquired_at END,
    value = CASE WHEN token IS excluded.token AND value_token IS excluded.token THEN value
                 ELSE excluded.value END,
    value_token = excluded.token,
    token = excluded.token,
    expires_at = excluded.expires_at,
    host = excluded.host,
    pid = excluded.pid,
    thread = excluded.thread
WHERE token IS excluded.token
   OR ((token IS NULL OR expires_at <= excluded.acquired_at) AND NOT {AHEAD})
RETURNING fence
"""

# Inputs :name :seq. The holder's remaining lease, to bound a waiter's back-off; NULL when a
# waiter is ahead (the lock's expiry is then theirs to notice: this one waits for its ring).
TTL_LEFT = f"""
SELECT CASE WHEN {AHEAD} THEN NULL ELSE expires_at - {NOW} END
FROM tenure_locks WHERE name = :name
"""

# Inputs :token :place. Refreshes a waiter's place; no row if it lapsed and was dropped.
KEEP_PLACE = f"""
UPDATE tenure_waiters SET expires_at = {NOW} + :place WHERE token = :token RETURNING seq
"""

# Inputs :kind :name :token :place :wake. A place at the back of the queue.
NEW_PLACE = f"""
INSERT INTO tenure_waiters (kind, name, seq, token, expires_at, wake)
SELECT :kind, :name, coalesce(max(seq), 0) + 1, :token, {NOW} + :place, :wake
FROM tenure_waiters WHERE kind = :kind AND name = :name
RETURNING seq
"""

# Inputs :kind :name. Places that lapsed (their waiter died or stalled).
DROP_LAPSED = f"""
DELETE FROM tenure_waiters WHERE kind = :kind AND name = :name AND expires_at <= {NOW}
"""

# Inputs :token.
LEAVE = "DELETE FROM tenure_waiters WHERE token = :token"

# Inputs :name. The lock is free (or was never taken).
LOCK_FREE = f"""
SELECT NOT EXISTS (SELECT 1 FROM tenure_locks
                   WHERE name = :name AND token IS NOT NULL AND expires_at > {NOW})
"""

# Inputs :kind :name. The longest-waiting live waiter: its token and doorbell address.
HEAD = f"""
SELECT token, wake FROM tenure_waiters
WHERE kind = :kind AND name = :name AND expires_at > {NOW} ORDER BY seq LIMIT 1
"""

# The head's token and doorbell, as two columns of a lock statement's RETURNING (:name).
_HEAD_COLUMN = f"""(SELECT w.{{column}} FROM tenure_waiters AS w
    WHERE w.kind = 'lock' AND w.name = :name AND w.expires_at > {NOW} ORDER BY w.seq LIMIT 1)"""
RETURNING_HEAD = (
    f"RETURNING {_HEAD_COLUMN.format(column='token')}, {_HEAD_COLUMN.format(column='wake')}"
)

# A free row's expires_at is when its last lease ended (released or broken: both change only
# a live lease, so now): the clean-up counts gc_after from it.
FREE = (
    f"token = NULL, expires_at = {NOW}, acquired_at = NULL, host = NULL, pid = NULL, "
    "thread = NULL, value = NULL, value_token = NULL"
)

# Inputs :name :token :value. One row changed = the value of our live lease was replaced.
SET_VALUE = f"""
UPDATE tenure_locks SET value = :value
WHERE name = :name AND token = :token AND value_token = :token AND expires_at > {NOW}
"""

# Inputs :name :token. A row = our live lease was released; it names the waiter to ring.
RELEASE = f"""
UPDATE tenure_locks SET {FREE}
WHERE name = :name AND token = :token AND expires_at > {NOW}
{RETURNING_HEAD}
"""


# Every kind's extend, one template. Inputs :name :token :ttl. One row changed = our live
# lease was extended (`lease`: what else tells a lease row in `table`).
def extending(table: str, lease: str = "") -> str:
    return f"""
UPDATE {table} SET expires_at = {NOW} + :ttl
WHERE name = :name AND token = :token{lease} AND expires_at > {NOW}
"""


# Every kind's ownership check, one template. Inputs :name :token. A row = our lease is live.
def owning(table: str, lease: str = "") -> str:
    return f"""
SELECT 1 FROM {table} WHERE name = :name AND token = :token{lease} AND expires_at > {NOW}
"""


EXTEND = extending("tenure_locks")
OWNED = owning("tenure_locks")

# Inputs :name. A row = a live lease was broken; it names the waiter to ring.
BREAK = f"""
UPDATE tenure_locks SET {FREE} WHERE name = :name AND expires_at > {NOW}
{RETURNING_HEAD}
"""

COLUMNS = f"""
SELECT name, fence, expires_at > {NOW}, host, pid, thread, acquired_at, expires_at - {NOW},
       CASE WHEN value_token IS token THEN value END
FROM tenure_locks
"""
INSPECT = COLUMNS + " WHERE name = :name"
# substr() compares the prefix as text: LIKE/GLOB would read % _ * ? in it as patterns.
LIST = COLUMNS + " WHERE substr(name, 1, length(:prefix)) = :prefix ORDER BY name"

# ---- clean-up (``SQLiteFile.collect``) ------------------------------------------------------

# Inputs :kind. The cursor: no row before the first pass.
SWEEP_AFTER = "SELECT after FROM tenure_sweep WHERE kind = :kind"

# Inputs :kind :after.
SWEEP_MOVE = """
INSERT INTO tenure_sweep (kind, after) VALUES (:kind, :after)
ON CONFLICT (kind) DO UPDATE SET after = excluded.after
"""


# Every kind's clean-up window, one template. Inputs :after :batch. The window of one pass:
# how many records follow the cursor (up to :batch) and the last of them (`record`: what
# tells a record row in `table`). Fewer than :batch: the sweep reached the end and wraps.
def sweep_window(table: str, record: str = "") -> str:
    return f"""
SELECT count(*), max(name) FROM
    (SELECT name FROM {table} WHERE {record}name > :after ORDER BY name LIMIT :batch)
"""


LOCK_WINDOW = sweep_window("tenure_locks")


# The clean-up of a kind whose record is the row of token '' beside its leases (semaphores,
# read-write locks). Inputs :after :last :gc_after. Deletes every row (the record and its
# ended leases) of each name of the window whose record was last in use gc_after ago or
# more, with no live lease (and `unused`: nothing else in use). SQLite reads the whole
# subquery before it deletes a row.
def swept_records(table: str, unused: str = "") -> str:
    return f"""
DELETE FROM {table} WHERE name IN (
    SELECT r.name FROM {table} AS r
    WHERE r.token = '' AND r.name > :after AND r.name <= :last
      AND r.expires_at <= {NOW} - :gc_after
      AND NOT EXISTS (SELECT 1 FROM {table} AS l
                      WHERE l.name = r.name AND l.token != '' AND l.expires_at > {NOW}){unused})
"""

# Inputs :after :last :gc_after. Deletes the window's idle rows: the last lease ended (or
# was released, or broken) gc_after ago or more, so none is live, and no waiter holds a live
# place. A live place is kept even on a free row: the row's absence would let a newcomer's
# insert take the lock ahead of that waiter.
COLLECT_LOCKS = f"""
DELETE FROM tenure_locks
WHERE name > :after AND name <= :last AND expires_at <= {NOW} - :gc_after
  AND NOT EXISTS (SELECT 1 FROM tenure_waiters AS w
                  WHERE w.kind = 'lock' AND w.name = tenure_locks.name AND w.expires_at > {NOW})
"""

# Inputs :gc_after :batch. Places that lapsed gc_after ago (a waiter that died; a live one
# refreshes its place every 0.25 s). The table holds only waiters, so this scan is short.
COLLECT_PLACES = f"""
DELETE FROM tenure_waiters WHERE token IN
    (SELECT token FROM tenure_waiters WHERE expires_at <= {NOW} - :gc_after LIMIT :batch)
"""
