"""The SQL of SQLite's semaphores, each statement with its contract; run by ``_store``.

Two tables beside ``tenure_locks``: one row per semaphore name (its fence counter and the
limit stored with its live permits), one row per permit. Every step runs in ONE write
transaction (``BEGIN IMMEDIATE``: the database's write lock is taken before anything is read,
so two processes can never both count the same free permit), judged by SQLite's clock
(``NOW``), the same host clock for every process using the file. The semaphore row is never
deleted by a release, so its fence only grows.
"""

from __future__ import annotations

from tenure.backends.sqlite._clock import NOW

__all__ = [
    "ACQUIRE_COUNT",
    "BREAK",
    "CREATE_TABLES",
    "DROP_EXPIRED",
    "EXTEND",
    "GRANT_FENCE",
    "INSERT_PERMIT",
    "LIST",
    "OWNED",
    "PERMITS",
    "RELEASE",
    "RENEW_OWN",
    "SEMAPHORE",
]

CREATE_TABLES = (
    """
CREATE TABLE IF NOT EXISTS tenure_semaphores (
    name        TEXT PRIMARY KEY NOT NULL,
    fence       INTEGER NOT NULL,
    permits     INTEGER NOT NULL
) WITHOUT ROWID
""",
    """
CREATE TABLE IF NOT EXISTS tenure_permits (
    name        TEXT NOT NULL,
    token       TEXT NOT NULL,
    fence       INTEGER NOT NULL,
    expires_at  REAL NOT NULL,
    acquired_at REAL NOT NULL,
    host        TEXT,
    pid         INTEGER,
    thread      TEXT,
    PRIMARY KEY (name, token)
) WITHOUT ROWID
""",
)
# ``permits`` is the limit: LIMIT is a keyword in SQL.

# Inputs :name. First step of an acquire: expired permits of the name are gone.
DROP_EXPIRED = f"DELETE FROM tenure_permits WHERE name = :name AND expires_at <= {NOW}"

# Inputs :name :token :ttl. A retried acquire: our live permit restarts, its fence returned.
RENEW_OWN = f"""
UPDATE tenure_permits SET expires_at = {NOW} + :ttl
WHERE name = :name AND token = :token RETURNING fence
"""

# Inputs :name. The live permits (after DROP_EXPIRED), the stored limit, and the soonest
# permit's remaining lease: what the grant is decided on.
ACQUIRE_COUNT = f"""
SELECT count(*), min(expires_at) - {NOW},
       (SELECT permits FROM tenure_semaphores WHERE name = :name)
FROM tenure_permits WHERE name = :name
"""

# Inputs :name :limit. Takes the next fence and stores the limit; returns the fence.
GRANT_FENCE = """
INSERT INTO tenure_semaphores (name, fence, permits) VALUES (:name, 1, :limit)
ON CONFLICT (name) DO UPDATE SET fence = fence + 1, permits = excluded.permits
RETURNING fence
"""

# Inputs :name :token :fence :ttl :host :pid :thread.
INSERT_PERMIT = f"""
INSERT INTO tenure_permits (name, token, fence, expires_at, acquired_at, host, pid, thread)
VALUES (:name, :token, :fence, {NOW} + :ttl, {NOW}, :host, :pid, :thread)
"""

# Inputs :name :token. Returns one row (1 if the permit was still live) when it was ours.
RELEASE = f"""
DELETE FROM tenure_permits WHERE name = :name AND token = :token
RETURNING expires_at > {NOW}
"""

# Inputs :name :token :ttl. One row changed = our live permit was extended.
EXTEND = f"""
UPDATE tenure_permits SET expires_at = {NOW} + :ttl
WHERE name = :name AND token = :token AND expires_at > {NOW}
"""

OWNED = f"""
SELECT 1 FROM tenure_permits WHERE name = :name AND token = :token AND expires_at > {NOW}
"""

# Inputs :name. Returns one row per permit that was live when broken.
BREAK = f"DELETE FROM tenure_permits WHERE name = :name RETURNING expires_at > {NOW}"

SEMAPHORE = "SELECT name, fence, permits FROM tenure_semaphores WHERE name = :name"
# substr() compares the prefix as text: LIKE/GLOB would read % _ * ? in it as patterns.
LIST = """
SELECT name, fence, permits FROM tenure_semaphores
WHERE substr(name, 1, length(:prefix)) = :prefix ORDER BY name
"""

# Inputs :name. The live permits, oldest grant first.
PERMITS = f"""
SELECT host, pid, thread, acquired_at, expires_at - {NOW}, fence FROM tenure_permits
WHERE name = :name AND expires_at > {NOW} ORDER BY fence
"""
