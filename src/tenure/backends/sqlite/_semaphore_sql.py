"""The SQL of SQLite's semaphores, each statement with its contract; run by ``_store``.

One table beside ``tenure_locks``, keyed (name, token): each permit is a row, and the
semaphore's own record is the row whose token is ``''`` (its fence counter, and the limit
stored with its live permits; no expiry). Keeping them in one table keeps a name's rows side
by side in one B-tree page, so a grant writes one page, as a lock's does. Every step runs in
ONE write transaction (``BEGIN IMMEDIATE``, or one write statement: the database's write
lock is taken before anything is read, so two processes can never both count the same free
permit), judged by SQLite's clock (``NOW``), the same host clock for every process using the
file. The common grant is one statement (``GRANT``), the record's fence and end moved by a
trigger inside it (``GRANTED_TRIGGER``). The record row is never deleted by a release or a
break; a grant's fence is max(its fence + 1, the host's clock in microseconds, read holding
the write lock), so fences strictly increase while it lives and never go
back when the clean-up (``COLLECT``) removed it. The record's ``expires_at`` is the latest end
any of its permits was granted or renewed to: the clean-up counts gc_after from it (from the
planned end: a permit released early keeps the record that much longer, never less).

Weighted FIFO permits: each permit row carries its ``weight`` (NULL: 1, as an older tenure
wrote it), and a grant needs the units of the live permits, plus the weights of the live
waiting places ahead of the attempt, plus its own weight, to stay within the limit. A
refused blocking attempt keeps a place in ``tenure_waiters`` (kind 'semaphore', with its
weight and who waits there since when: the ``PLACE_COLUMNS``, added in place by the first
queued acquire, as the read-write locks' are), refreshed by each of its tries, removed by
its grant or its token's release; an attempt without a place stands behind every live one.
So a heavy waiter at the head holds back lighter ones behind it. The common grant (``GRANT``,
nobody waiting) stays one statement; the rest is one transaction (``Permits.acquire``), its
statements judging expiry at one instant (``:now``, SQLite's clock read once).
"""

from __future__ import annotations

from tenure.backends.sqlite._clock import CLOCK_US, NOW
from tenure.backends.sqlite._lock_sql import extending, owning, sweep_window, swept_records

__all__ = [
    "ADDED_COLUMNS",
    "AHEAD",
    "BREAK",
    "CLOCK",
    "COLLECT",
    "CREATE_TABLE",
    "EXTEND",
    "GRANT",
    "GRANTED_TRIGGER",
    "GRANT_FENCE",
    "INSERT_PERMIT",
    "KEEP_PLACE",
    "LEAVE",
    "LIST",
    "NEW_PLACE",
    "OWNED",
    "PERMITS",
    "PLACE",
    "PLACES",
    "PLACE_COLUMNS",
    "RELEASE",
    "RENEW_LIVE",
    "SEMAPHORE",
    "STAMP",
    "STAMP_OLD",
    "STATE",
    "STORED_LIMIT",
    "WINDOW",
]

CREATE_TABLE = """
CREATE TABLE IF NOT EXISTS tenure_permits (
    name        TEXT NOT NULL,
    token       TEXT NOT NULL,
    fence       INTEGER NOT NULL,
    permits     INTEGER,
    expires_at  REAL,
    acquired_at REAL,
    host        TEXT,
    pid         INTEGER,
    thread      TEXT,
    weight      INTEGER,
    PRIMARY KEY (name, token)
) WITHOUT ROWID
"""
# ``weight`` came after the table: a file from before it gets the column at open
# (``ADDED_COLUMNS``, nullable: NULL reads as 1, and an older tenure, which names its columns
# when it inserts, keeps working on the file, counting its permits as one unit each).
ADDED_COLUMNS = (("weight", "INTEGER"),)
# The waiting places' columns in ``tenure_waiters`` (the read-write locks' and the weight),
# added by the first queued acquire, each only if missing.
PLACE_COLUMNS = (
    ("mode", "TEXT"), ("host", "TEXT"), ("pid", "INTEGER"), ("thread", "TEXT"),
    ("placed_at", "REAL"), ("fair", "INTEGER"), ("weight", "INTEGER"),
)
# ``permits`` is the limit (LIMIT is a keyword), set on the record row only. The record row's
# ``expires_at`` is when it was last in use (see above), not a lease: every statement about
# permits asks for ``token != ''`` or a token of its own.

_LIVE = f"name = :name AND token != '' AND expires_at > {NOW}"

# A permit row inserted moves its record's fence and end up to its own, in the inserting
# statement: so GRANT, one INSERT, is a whole grant. For an insert after TAKE_FENCE or
# GRANT_FENCE (which moved the record already), and for a tenure from before this trigger
# that shares the file, the fence stays as it is, and the end moves at most by the
# milliseconds between the two statements' clocks (the record then counts as in use that
# much longer: harmless to the clean-up).
GRANTED_TRIGGER = """
CREATE TRIGGER IF NOT EXISTS tenure_permit_granted AFTER INSERT ON tenure_permits
WHEN NEW.token != ''
BEGIN
    UPDATE tenure_permits
    SET fence = max(fence, NEW.fence),
        expires_at = max(coalesce(expires_at, 0), NEW.expires_at)
    WHERE name = NEW.name AND token = '';
END
"""

_PLACES = "tenure_waiters WHERE kind = 'semaphore' AND name = :name"

# Inputs :name :token :limit :weight :ttl :host :pid :thread. The common grant in one
# statement, its own transaction (the write lock taken before anything is read): a permit
# row whose fence is max(record fence + 1, the clock floor read by SQLite, CLOCK_US),
# inserted only if the stored limit is :limit, the live permits' units plus :weight stay
# within :limit, nobody holds a live place in the queue (a newcomer stands behind every
# waiter; a waiter's own place sends it to the transaction), and this token has no row (a
# retry, or its own expired permit). GRANTED_TRIGGER moves the record. No row: nothing
# written; decide in a transaction (``Permits.acquire``).
GRANT = f"""
INSERT INTO tenure_permits
    (name, token, fence, expires_at, acquired_at, host, pid, thread, weight)
SELECT :name, :token, max(record.fence + 1, {CLOCK_US}), {NOW} + :ttl, {NOW},
       :host, :pid, :thread, :weight
FROM tenure_permits AS record
WHERE record.name = :name AND record.token = '' AND record.permits = :limit
  AND (SELECT coalesce(sum(coalesce(weight, 1)), 0) FROM tenure_permits WHERE {_LIVE})
      + :weight <= :limit
  AND NOT EXISTS (SELECT 1 FROM {_PLACES} AND expires_at > {NOW})
  AND NOT EXISTS (SELECT 1 FROM tenure_permits WHERE name = :name AND token = :token)
RETURNING fence
"""

CLOCK = f"SELECT {NOW}"

# Inputs :name :token :ttl :now. A retried acquire of a live permit (a lost reply): its
# expiry restarts, its fence stays (then STAMP). No row: the token holds no live permit.
RENEW_LIVE = """
UPDATE tenure_permits SET expires_at = :now + :ttl
WHERE name = :name AND token = :token AND token != '' AND expires_at > :now
RETURNING fence
"""

# Inputs :name :now. Expired permits of the name go (so that a retry whose own permit expired
# cannot collide with its old row); rowcount = how many.
DROP_EXPIRED = """
DELETE FROM tenure_permits WHERE name = :name AND token != '' AND expires_at <= :now
"""

# Inputs :name :now. Places that lapsed (their waiter died or stalled); rowcount = how many.
DROP_LAPSED = f"DELETE FROM {_PLACES} AND expires_at <= :now"

# Inputs :name :now, after DROP_EXPIRED. The live permits: how many, their units, the
# soonest one's seconds left (NULL when none).
STATE = """
SELECT count(*), coalesce(sum(coalesce(weight, 1)), 0), min(expires_at) - :now
FROM tenure_permits WHERE name = :name AND token != ''
"""

# Inputs :name :token. The caller's place: its arrival position, or no row.
PLACE = f"SELECT seq FROM {_PLACES} AND token = :token"

# Inputs :name :seq :now (the caller's place, or NOT_QUEUED when it has none). The weights
# of the live places ahead of it. One row.
AHEAD = f"""
SELECT coalesce(sum(coalesce(weight, 1)), 0) FROM {_PLACES} AND expires_at > :now AND seq < :seq
"""

# Inputs :name :token :weight :place (seconds) :now. Refreshes the caller's place, keeping its
# position. No row: it has none.
KEEP_PLACE = """
UPDATE tenure_waiters SET expires_at = :now + :place, weight = :weight
WHERE kind = 'semaphore' AND name = :name AND token = :token
RETURNING seq
"""

# Inputs :name :token :weight :place :now :host :pid :thread. A place at the back of the
# queue, taken now by that waiter.
NEW_PLACE = f"""
INSERT INTO tenure_waiters
    (kind, name, seq, token, expires_at, wake, host, pid, thread, placed_at, weight)
SELECT 'semaphore', :name, coalesce(max(seq), 0) + 1, :token, :now + :place, NULL,
       :host, :pid, :thread, :now, :weight
FROM {_PLACES}
"""

# Inputs :name :token. Removes the caller's place, if any; rowcount = 1 if it had one.
LEAVE = f"DELETE FROM {_PLACES} AND token = :token"

# Inputs :name :now. The live places, in arrival order: host, pid, thread, placed_at, weight.
PLACES = f"""
SELECT host, pid, thread, placed_at, weight FROM {_PLACES} AND expires_at > :now ORDER BY seq
"""

STORED_LIMIT = "SELECT permits FROM tenure_permits WHERE name = :name AND token = ''"

# Inputs :name :ttl. A permit of the name was renewed (or its acquire retried) to now + ttl:
# the record counts as in use until then.
STAMP = f"""
UPDATE tenure_permits SET expires_at = max(coalesce(expires_at, 0), {NOW} + :ttl)
WHERE name = :name AND token = ''
"""

# A file from before the clean-up: its records count as used now.
STAMP_OLD = f"""
UPDATE tenure_permits SET expires_at = {NOW} WHERE token = '' AND expires_at IS NULL
"""

# Inputs :name :limit :live (live permits of others) :ttl :floor. First use of a name, or a
# new limit once none is live: takes the next fence and stores the limit, unless permits are
# live under another limit: then no row, and nothing written.
GRANT_FENCE = f"""
INSERT INTO tenure_permits (name, token, fence, permits, expires_at)
VALUES (:name, '', :floor, :limit, {NOW} + :ttl)
ON CONFLICT (name, token) DO UPDATE SET
    fence = max(fence + 1, excluded.fence),
    permits = excluded.permits,
    expires_at = max(coalesce(expires_at, 0), excluded.expires_at)
WHERE :live = 0 OR permits = excluded.permits
RETURNING fence
"""

# Inputs :name :token :fence :ttl :now :host :pid :thread :weight.
INSERT_PERMIT = """
INSERT INTO tenure_permits
    (name, token, fence, expires_at, acquired_at, host, pid, thread, weight)
VALUES (:name, :token, :fence, :now + :ttl, :now, :host, :pid, :thread, :weight)
"""

# Inputs :name :token. Removes our permit, and the name's expired ones while at it; one row
# per removed permit: (it was ours, it was live). (Its place, if it waited: LEAVE.)
RELEASE = f"""
DELETE FROM tenure_permits
WHERE name = :name AND token != '' AND (token = :token OR expires_at <= {NOW})
RETURNING token = :token, expires_at > {NOW}
"""

EXTEND = extending("tenure_permits")
OWNED = owning("tenure_permits")

# Inputs :name. Returns one row per permit removed, 1 if it was live.
BREAK = f"""
DELETE FROM tenure_permits WHERE name = :name AND token != ''
RETURNING expires_at > {NOW}
"""

SEMAPHORE = """
SELECT name, fence, permits FROM tenure_permits WHERE name = :name AND token = ''
"""
# substr() compares the prefix as text: LIKE/GLOB would read % _ * ? in it as patterns.
LIST = """
SELECT name, fence, permits FROM tenure_permits
WHERE token = '' AND substr(name, 1, length(:prefix)) = :prefix ORDER BY name
"""

# Inputs :name. The live permits, oldest grant first, each with its weight.
PERMITS = f"""
SELECT host, pid, thread, acquired_at, expires_at - {NOW}, fence, NULL, coalesce(weight, 1)
FROM tenure_permits WHERE {_LIVE} ORDER BY fence
"""

# ---- clean-up (run by ``SQLiteFile.collect``) ----------------------------------------------

WINDOW = sweep_window("tenure_permits", "token = '' AND ")
COLLECT = swept_records("tenure_permits")
