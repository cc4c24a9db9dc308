"""The SQL of SQLite's read-write and fair locks, each statement with its contract; run by
``_store``.

Holder leases live in ``tenure_rwlocks``, keyed (name, token), one row per lease (``mode``
'read' or 'write', its fence, expiry and holder, ``fair`` 1 for a fair lock's), beside the
name's record row, whose token is ``''``: the name's fence counter, shared by reads and
writes, never deleted by a release or a break. A grant's fence is max(the counter + 1,
:floor, the host's clock in microseconds), so fences strictly increase while the record
lives and never go back when the clean-up (``COLLECT``) removed it. The record's
``expires_at`` is the latest end any of its leases was granted or renewed to: the clean-up
counts gc_after from it. A name's rows sit side by side in one B-tree page.

Waiting places are rows of the lock's waiter table ``tenure_waiters`` with ``kind`` 'rwlock'
and the ``PLACE_COLUMNS`` (added in place with the lease table, by the first acquire): a
place is exactly what a lock's waiter is (token, arrival position ``seq``, an expiry by
SQLite's clock, the waiting process's doorbell address), plus its mode, who waits there
since when (``tenure show`` lists them) and ``fair``. Refreshing it changes its expiry only,
so it keeps its position and its start.

``fair`` (1: a fair lock's lease or place, NULL: a read-write lock's, or written by a tenure
from before the column) only names the primitive for ``inspect``; no grant reads it. It is a
nullable column of both tables. Every column a file from before it lacks (``ADDED_COLUMNS``:
the places' holders and fair, the leases' fair) is added in place by the first acquire, in
one step; until then the file is read as is, a missing column as NULL (its places list an
unknown waiter, its entries are a read-write lock's: ``leases_read``, ``places_read``), and
an older tenure, which names its columns when it writes, keeps working on the upgraded file.

Every step that writes runs in ONE write transaction (``BEGIN IMMEDIATE``: the database's
write lock is taken before anything is read); inspecting reads one snapshot. ``:now`` is
SQLite's clock (``NOW``), read once by the first statement of the transaction, so that every
statement of one step judges expiry at the same instant.
"""

from __future__ import annotations

from tenure.backends.sqlite._clock import NOW
from tenure.backends.sqlite._lock_sql import extending, owning, sweep_window, swept_records

__all__ = [
    "ADDED_COLUMNS",
    "BREAK",
    "CLOCK",
    "COLLECT",
    "CREATE_TABLE",
    "DROP_EXPIRED",
    "DROP_LAPSED",
    "EXTEND",
    "GRANTABLE",
    "INSERT_LEASE",
    "KEEP_PLACE",
    "LEAVE",
    "LEASES",
    "LEASE_COLUMNS",
    "LIST",
    "NEW_PLACE",
    "NEXT_FENCE",
    "OWNED",
    "PLACE",
    "PLACES",
    "PLACE_COLUMNS",
    "RECORD",
    "RELEASE",
    "RENEW_OWN",
    "SOONEST",
    "STAMP",
    "STAMP_OLD",
    "TABLE_EXISTS",
    "TO_RING",
    "WINDOW",
    "leases_read",
    "places_read",
]

CREATE_TABLE = """
CREATE TABLE IF NOT EXISTS tenure_rwlocks (
    name        TEXT NOT NULL,
    token       TEXT NOT NULL,
    mode        TEXT,
    fence       INTEGER NOT NULL,
    expires_at  REAL,
    acquired_at REAL,
    host        TEXT,
    pid         INTEGER,
    thread      TEXT,
    fair        INTEGER,
    PRIMARY KEY (name, token)
) WITHOUT ROWID
"""
# The record row (token '') has no mode; its ``expires_at`` is when it was last in use (see
# above), not a lease: every statement about leases asks for ``token != ''``.

# A place's mode, its waiter (who, since when by SQLite's clock) and whether a fair lock
# waits there, added to ``tenure_waiters`` (nullable: a lock's waiter has none, and an older
# tenure, which names its columns when it inserts, keeps working on the file; its places list
# an unknown waiter); and whether a lease is a fair lock's (1, NULL for a read-write lock's),
# added to ``tenure_rwlocks``. The holder and fair columns came after the mode: a file whose
# lease table an older tenure made gets every one it lacks at the first acquire of a newer
# one, in one step.
PLACE_COLUMNS = (
    ("mode", "TEXT"), ("host", "TEXT"), ("pid", "INTEGER"), ("thread", "TEXT"),
    ("placed_at", "REAL"), ("fair", "INTEGER"),
)
LEASE_COLUMNS = (("fair", "INTEGER"),)
ADDED_COLUMNS = (("tenure_waiters", PLACE_COLUMNS), ("tenure_rwlocks", LEASE_COLUMNS))

# A row once the first read-write lock acquire made the tables.
TABLE_EXISTS = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'tenure_rwlocks'"

CLOCK = f"SELECT {NOW}"

_PLACES = "tenure_waiters WHERE kind = 'rwlock' AND name = :name"

# Inputs :name :now. Leases that ended; rowcount = how many.
DROP_EXPIRED = """
DELETE FROM tenure_rwlocks WHERE name = :name AND token != '' AND expires_at <= :now
"""

# Inputs :name :now. Places that lapsed (their waiter died or stalled); rowcount = how many.
DROP_LAPSED = f"DELETE FROM {_PLACES} AND expires_at <= :now"

# Inputs :name :token :ttl :now. A retry of a live lease's acquire (a lost reply): its expiry
# restarts, its fence stays. No row: the token holds no lease.
RENEW_OWN = """
UPDATE tenure_rwlocks SET expires_at = :now + :ttl
WHERE name = :name AND token = :token AND token != ''
RETURNING fence
"""

# Inputs :name :token. The caller's place: its arrival position, or no row.
PLACE = f"SELECT seq FROM {_PLACES} AND token = :token"

# Inputs :name :mode :seq (the caller's place, or a number above every place when it has
# none), after the expired rows were dropped. 1 = the grant rule admits the caller: a write
# when no lease and no place ahead; a read when no write lease and no write place ahead.
GRANTABLE = f"""
SELECT NOT EXISTS (SELECT 1 FROM tenure_rwlocks
                   WHERE name = :name AND token != '' AND (:mode = 'write' OR mode = 'write'))
   AND NOT EXISTS (SELECT 1 FROM {_PLACES}
                   AND seq < :seq AND (:mode = 'write' OR mode = 'write'))
"""

# Inputs :name :floor :now :ttl. The name's next fence, max(fence + 1, :floor) (the record
# row made on first use), the record in use until the new lease's end. One row.
NEXT_FENCE = """
INSERT INTO tenure_rwlocks (name, token, fence, expires_at)
VALUES (:name, '', :floor, :now + :ttl)
ON CONFLICT (name, token) DO UPDATE SET
    fence = max(fence + 1, excluded.fence),
    expires_at = max(coalesce(expires_at, 0), excluded.expires_at)
RETURNING fence
"""

# Inputs :name :ttl. A lease of the name was renewed (or its acquire retried) to now + ttl:
# the record counts as in use until then.
STAMP = f"""
UPDATE tenure_rwlocks SET expires_at = max(coalesce(expires_at, 0), {NOW} + :ttl)
WHERE name = :name AND token = ''
"""

# A file from before the clean-up: its records count as used now.
STAMP_OLD = f"""
UPDATE tenure_rwlocks SET expires_at = {NOW} WHERE token = '' AND expires_at IS NULL
"""

# Inputs :name :token :mode :fence :ttl :now :host :pid :thread :fair.
INSERT_LEASE = """
INSERT INTO tenure_rwlocks
    (name, token, mode, fence, expires_at, acquired_at, host, pid, thread, fair)
VALUES (:name, :token, :mode, :fence, :now + :ttl, :now, :host, :pid, :thread, :fair)
"""

# Inputs :name :token. Removes the caller's place, if any.
LEAVE = f"DELETE FROM {_PLACES} AND token = :token"

# Inputs :name :token :mode :place (seconds) :now :wake :fair. Refreshes the caller's place
# keeping its position (and records where its waiter now listens). No row: it has none.
KEEP_PLACE = """
UPDATE tenure_waiters SET expires_at = :now + :place, mode = :mode, wake = :wake, fair = :fair
WHERE kind = 'rwlock' AND name = :name AND token = :token
RETURNING seq
"""

# Inputs :name :token :mode :place :now :wake :host :pid :thread :fair. A place at the back
# of the queue, taken now by that waiter.
NEW_PLACE = f"""
INSERT INTO tenure_waiters
    (kind, name, seq, token, expires_at, wake, mode, host, pid, thread, placed_at, fair)
SELECT 'rwlock', :name, coalesce(max(seq), 0) + 1, :token, :now + :place, :wake, :mode,
       :host, :pid, :thread, :now, :fair
FROM {_PLACES}
"""

# Inputs :name :token :now. The soonest-ending live lease of another token: its seconds
# left (NULL when none: only places ahead hold the caller back).
SOONEST = """
SELECT min(expires_at) - :now FROM tenure_rwlocks
WHERE name = :name AND token != '' AND token != :token AND expires_at > :now
"""

# Inputs :name :now. The places the grant rule would admit now, in arrival order, with their
# doorbells: the waiters a release, a break or a dropped entry must wake. After a write
# release that is every reader queued before the first writer; after the last reader's, the
# writer at the head.
TO_RING = """
SELECT w.token, w.wake FROM tenure_waiters AS w
WHERE w.kind = 'rwlock' AND w.name = :name AND w.expires_at > :now
  AND NOT EXISTS (SELECT 1 FROM tenure_rwlocks AS l
                  WHERE l.name = :name AND l.token != '' AND l.expires_at > :now
                    AND (w.mode = 'write' OR l.mode = 'write'))
  AND NOT EXISTS (SELECT 1 FROM tenure_waiters AS a
                  WHERE a.kind = 'rwlock' AND a.name = :name AND a.expires_at > :now
                    AND a.seq < w.seq AND (w.mode = 'write' OR a.mode = 'write'))
ORDER BY w.seq
LIMIT 256
"""
# At most 256 rung per event (as Redis's walk): the next release or a waiter's own pause
# reaches any further readers, and the query runs inside the write transaction.

# Inputs :name :token :now. Removes the token's lease; a row (it was live) if it had one.
RELEASE = """
DELETE FROM tenure_rwlocks WHERE name = :name AND token = :token AND token != ''
RETURNING expires_at > :now
"""

EXTEND = extending("tenure_rwlocks", " AND token != ''")
OWNED = owning("tenure_rwlocks", " AND token != ''")

# Inputs :name :now. Removes every lease of the name (the record row, its fence and the
# places stay); one row per lease removed, 1 if it was live.
BREAK = """
DELETE FROM tenure_rwlocks WHERE name = :name AND token != ''
RETURNING expires_at > :now
"""

# Inputs :name :now. The record: name, fence, live places.
_RECORD = """
SELECT r.name, r.fence,
       (SELECT count(*) FROM tenure_waiters AS w
        WHERE w.kind = 'rwlock' AND w.name = r.name AND w.expires_at > :now)
FROM tenure_rwlocks AS r
"""
RECORD = _RECORD + " WHERE r.name = :name AND r.token = ''"
# substr() compares the prefix as text: LIKE/GLOB would read % _ * ? in it as patterns.
LIST = _RECORD + """
WHERE r.token = '' AND substr(r.name, 1, length(:prefix)) = :prefix ORDER BY r.name
"""

# Inputs :name :now. The live places, in arrival order: host, pid, thread, placed_at, mode,
# fair (each column the file lacks yet read as NULL: ``places_read``).
_PLACES_READ = f"""
SELECT {{}} FROM {_PLACES} AND expires_at > :now ORDER BY seq
"""
_PLACE_READ = ("host", "pid", "thread", "placed_at", "mode", "fair")


def places_read(present: set[str]) -> str:
    """PLACES for a waiter table with the columns ``present``."""
    return _PLACES_READ.format(
        ", ".join(column if column in present else "NULL" for column in _PLACE_READ)
    )


PLACES = places_read(set(_PLACE_READ))

# Inputs :name :now. The live leases, oldest grant first, each with ``fair`` (NULL on a file
# without the column yet: ``leases_read``).
_LEASES = """
SELECT host, pid, thread, acquired_at, expires_at - :now, fence, mode, {}
FROM tenure_rwlocks WHERE name = :name AND token != '' AND expires_at > :now ORDER BY fence
"""


def leases_read(present: set[str]) -> str:
    """LEASES for a lease table with the columns ``present``."""
    return _LEASES.format("fair" if "fair" in present else "NULL")


LEASES = leases_read({"fair"})

# ---- clean-up (run by ``SQLiteFile.collect``) ----------------------------------------------

WINDOW = sweep_window("tenure_rwlocks", "token = '' AND ")
# No live place in the queue either: a free name with a waiter is in use.
COLLECT = swept_records("tenure_rwlocks", f"""
      AND NOT EXISTS (SELECT 1 FROM tenure_waiters AS w
                      WHERE w.kind = 'rwlock' AND w.name = r.name AND w.expires_at > {NOW})""")
