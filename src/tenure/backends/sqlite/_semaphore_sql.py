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
"""

from __future__ import annotations

from tenure.backends.sqlite._clock import CLOCK_US, NOW
from tenure.backends.sqlite._lock_sql import extending, owning, sweep_window, swept_records

__all__ = [
    "ACQUIRE_STATE",
    "BREAK",
    "COLLECT",
    "CREATE_TABLE",
    "DROP_EXPIRED",
    "EXTEND",
    "GRANT",
    "GRANTED_TRIGGER",
    "GRANT_FENCE",
    "INSERT_PERMIT",
    "LIST",
    "OWNED",
    "PERMITS",
    "RELEASE",
    "RENEW_OWN",
    "SEMAPHORE",
    "STAMP",
    "STAMP_OLD",
    "STORED_LIMIT",
    "TAKE_FENCE",
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
    PRIMARY KEY (name, token)
) WITHOUT ROWID
"""
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

# Inputs :name :token :limit :ttl :host :pid :thread. The common grant in one statement, its
# own transaction (the write lock taken before anything is read): a permit row whose fence is
# max(record fence + 1, the clock floor read by SQLite, CLOCK_US), inserted only if the stored
# limit is :limit, fewer than :limit permits are live, and this token has no row (a retry,
# or its own expired permit). GRANTED_TRIGGER moves the record. No row: nothing written;
# decide in a transaction (TAKE_FENCE, then ACQUIRE_STATE).
GRANT = f"""
INSERT INTO tenure_permits (name, token, fence, expires_at, acquired_at, host, pid, thread)
SELECT :name, :token, max(record.fence + 1, {CLOCK_US}), {NOW} + :ttl, {NOW},
       :host, :pid, :thread
FROM tenure_permits AS record
WHERE record.name = :name AND record.token = '' AND record.permits = :limit
  AND (SELECT count(*) FROM tenure_permits WHERE {_LIVE}) < :limit
  AND NOT EXISTS (SELECT 1 FROM tenure_permits WHERE name = :name AND token = :token)
RETURNING fence
"""

# Inputs :name :token :limit :ttl :floor. In the transaction, when GRANT was refused or
# skipped: the next fence (max(fence + 1, :floor)), taken only if the stored limit is :limit,
# fewer than :limit permits are live, and this token has none (a retry); INSERT_PERMIT then
# adds the permit. No row: decide with ACQUIRE_STATE.
TAKE_FENCE = f"""
UPDATE tenure_permits
SET fence = max(fence + 1, :floor), expires_at = max(coalesce(expires_at, 0), {NOW} + :ttl)
WHERE name = :name AND token = '' AND permits = :limit
  AND (SELECT count(*) FROM tenure_permits WHERE {_LIVE}) < :limit
  AND NOT EXISTS (SELECT 1 FROM tenure_permits WHERE name = :name AND token = :token)
RETURNING fence
"""

# Inputs :name :token. The rarer cases, in one read: the live permits of others, the soonest
# one's remaining lease, our own live permit's fence (a retried acquire), and whether expired
# rows are left (a retry whose own permit expired must not collide with its old row).
ACQUIRE_STATE = f"""
SELECT count(*) FILTER (WHERE live AND token != :token),
       min(expires_at) FILTER (WHERE live) - {NOW},
       max(fence) FILTER (WHERE live AND token = :token),
       count(*) FILTER (WHERE NOT live)
FROM (SELECT token, fence, expires_at, expires_at > {NOW} AS live
      FROM tenure_permits WHERE name = :name AND token != '')
"""

STORED_LIMIT = "SELECT permits FROM tenure_permits WHERE name = :name AND token = ''"

# Inputs :name. Expired permits of the name are gone.
DROP_EXPIRED = f"""
DELETE FROM tenure_permits WHERE name = :name AND token != '' AND expires_at <= {NOW}
"""

# Inputs :name :token :ttl. A retried acquire: our live permit restarts (then STAMP).
RENEW_OWN = f"""
UPDATE tenure_permits SET expires_at = {NOW} + :ttl WHERE name = :name AND token = :token
"""

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

# Inputs :name :token :fence :ttl :host :pid :thread.
INSERT_PERMIT = f"""
INSERT INTO tenure_permits (name, token, fence, expires_at, acquired_at, host, pid, thread)
VALUES (:name, :token, :fence, {NOW} + :ttl, {NOW}, :host, :pid, :thread)
"""

# Inputs :name :token. Removes our permit, and the name's expired ones while at it; one row
# per removed permit: (it was ours, it was live).
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

# Inputs :name. The live permits, oldest grant first.
PERMITS = f"""
SELECT host, pid, thread, acquired_at, expires_at - {NOW}, fence, NULL FROM tenure_permits
WHERE {_LIVE} ORDER BY fence
"""

# ---- clean-up (run by ``SQLiteFile.collect``) ----------------------------------------------

WINDOW = sweep_window("tenure_permits", "token = '' AND ")
COLLECT = swept_records("tenure_permits")
