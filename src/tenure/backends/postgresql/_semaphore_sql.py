"""The SQL of PostgreSQL's semaphores, with each statement's contract above it.

One table beside the lock table, ``{table}_permits``, keyed (name, token): each permit is a
row, and the semaphore's own record is the row whose token is ``''`` (its fence counter, and
the limit stored with its live permits; no expiry).

Fences and clean-up (rule 10): a grant's fence is max(the record's fence + 1, the server's
clock in microseconds), in the granting statement, so fences never go back even when the
record is gone. A release ends its permit (expiry set to now, holder cleared) instead of
deleting it: the ended row is the time the name was last used, until the next acquire of the
name drops it (as it drops expired permits) or SWEEP removes the name. A name's permit rows
are never all gone while it is in use: an acquire drops expired permits only in the
statement that grants one (or finds others live). SWEEP deletes a name's record and its
permit rows when every permit ended more than ``gc_after`` ago.

A grant needs a count of the live permits that no concurrent grant can change before the
grant is written. One statement under READ COMMITTED reads its rows from the snapshot taken
when it starts, before any row lock it then waits for, so it cannot hold the count still; it
can detect that the count moved, though, because only a grant adds a permit and every grant
bumps the record's fence. So an acquire first tries ACQUIRE, one statement: it counts the
live permits and reads the record's fence in its snapshot, then upserts the record with that
fence + 1 on the condition that the fence is still the one it read, a condition PostgreSQL
judges on the latest committed version of the row, after waiting for its lock. If the fence
moved (a grant landed between the snapshot and the lock), ACQUIRE writes nothing and says
so, and the acquire decides again in one short transaction of two statements that cannot
race: LOCK_NAME takes the record's row lock (concurrent acquirers of the name queue there)
and GRANT, a new statement with a new snapshot that sees every permit committed before the
lock was ours, decides and writes. The count can only be too high by the snapshot's age
(permits released or expired meanwhile still counted), which errs towards Busy; the waiter
then wakes on the release's NOTIFY. Every other step is one statement. Time is the server's
``clock_timestamp()``, once per statement.

A release and a break NOTIFY the lock table's channel with ``semaphore:`` and the name, so
the waiters' one LISTEN connection serves semaphores too (a lock whose own name starts
so only gets a spurious wake-up).
"""

from __future__ import annotations

import dataclasses

from tenure.backends.postgresql._sql import FENCE_FLOOR, IDLE_SINCE

__all__ = ["WAKE_PREFIX", "SemaphoreStatements"]

WAKE_PREFIX = "semaphore:"
_NOW = "now AS MATERIALIZED (SELECT clock_timestamp() AS t)"
_ENDED = "expires_at = now.t, host = NULL, pid = NULL, thread = NULL"
"""An ended permit: kept, not live, as the time its name was last used."""


@dataclasses.dataclass(frozen=True)
class SemaphoreStatements:
    table: str
    """The lock table's validated name; the permits table is named after it."""

    @property
    def permits(self) -> str:
        return f"{self.table[:55]}_permits"

    @property
    def quoted(self) -> str:
        return f'"{self.permits}"'

    @property
    def exists(self) -> str:
        return "SELECT to_regclass(%(permits)s) IS NOT NULL"

    @property
    def create(self) -> str:
        return f"""
CREATE TABLE IF NOT EXISTS {self.quoted} (
    name        text COLLATE "C" NOT NULL,
    token       text COLLATE "C" NOT NULL,
    fence       bigint NOT NULL,
    permits     integer,
    expires_at  timestamptz,
    acquired_at timestamptz,
    host        text,
    pid         bigint,
    thread      text,
    PRIMARY KEY (name, token)
)
"""

    # The CTE both grants end with: our permit row, with the fence `bumped` returned (none if
    # it returned no row).
    @property
    def _granted(self) -> str:
        return f"""granted AS (
    INSERT INTO {self.quoted} (name, token, fence, expires_at, acquired_at, host, pid, thread)
    SELECT %(name)s, %(token)s, bumped.fence, now.t + %(ttl)s * interval '1 second', now.t,
           %(host)s, %(pid)s, %(thread)s
    FROM bumped, now
    ON CONFLICT (name, token) DO UPDATE SET
        fence = excluded.fence, expires_at = excluded.expires_at,
        acquired_at = excluded.acquired_at
    RETURNING fence
)"""

    # Inputs: name, token, ttl, limit, host, pid, thread; one statement in autocommit (see
    # the module's doc). Drops expired (and ended) permits; restarts our own live permit (a
    # retry); else, if fewer than `limit` others are live and none is live under another
    # limit, takes the next fence (max(fence + 1, FENCE_FLOOR)) and adds our permit,
    # provided the record's fence is still the one this statement's snapshot holds (the
    # conflict clause's WHERE is judged on the row's latest version, locked). Output: one
    # row (own fence, granted fence, live others, seconds left of the soonest permit, stored
    # limit, room); at most one of the fences is not NULL, and both NULL with room true
    # means the fence moved: decide again with LOCK_NAME + GRANT.
    @property
    def acquire(self) -> str:
        return f"""
WITH {_NOW},
state AS (
    SELECT count(*) FILTER (WHERE p.token <> %(token)s AND p.expires_at > now.t) AS others,
           count(*) FILTER (WHERE p.expires_at <= now.t) AS expired,
           max(p.fence) FILTER (WHERE p.token = %(token)s AND p.expires_at > now.t) AS mine,
           min(p.expires_at) FILTER (WHERE p.expires_at > now.t) AS soonest,
           max(p.fence) FILTER (WHERE p.token = '') AS fence,
           max(p.permits) FILTER (WHERE p.token = '') AS stored
    FROM {self.quoted} AS p, now
    WHERE p.name = %(name)s
),
dropped AS (
    DELETE FROM {self.quoted} AS p USING now
    WHERE (SELECT expired FROM state) > 0
      AND p.name = %(name)s AND p.token <> '' AND p.expires_at <= now.t
),
mine AS (
    UPDATE {self.quoted} AS p SET expires_at = now.t + %(ttl)s * interval '1 second'
    FROM now
    WHERE (SELECT mine FROM state) IS NOT NULL
      AND p.name = %(name)s AND p.token = %(token)s AND p.expires_at > now.t
    RETURNING p.fence
),
room AS (
    SELECT state.fence AS fence FROM state
    WHERE NOT EXISTS (SELECT 1 FROM mine)
      AND state.others < %(limit)s
      AND (state.others = 0 OR state.stored = %(limit)s)
),
bumped AS (
    INSERT INTO {self.quoted} AS rec (name, token, fence, permits)
    SELECT %(name)s, '', greatest(coalesce(room.fence, 0) + 1, {FENCE_FLOOR}), %(limit)s
    FROM room, now
    ON CONFLICT (name, token) DO UPDATE SET fence = excluded.fence, permits = excluded.permits
    WHERE rec.fence = coalesce((SELECT fence FROM room), 0)
    RETURNING rec.fence
),
{self._granted}
SELECT (SELECT fence FROM mine), (SELECT fence FROM granted), state.others,
       extract(epoch FROM state.soonest - now.t)::float8, state.stored,
       EXISTS (SELECT 1 FROM room)
FROM state, now
"""

    # Inputs: name, limit. Creates the record row if absent and takes its row lock until the
    # transaction ends (a conflict clause locks the row even when its WHERE then refuses the
    # update, so no new row version is written). Output: none.
    @property
    def lock_name(self) -> str:
        return f"""
INSERT INTO {self.quoted} AS rec (name, token, fence, permits) VALUES (%(name)s, '', 0, %(limit)s)
ON CONFLICT (name, token) DO UPDATE SET fence = rec.fence WHERE false
"""

    # Inputs: name, token, ttl, limit, host, pid, thread; run holding the name's row lock.
    # Drops expired permits; restarts our own live permit (a retry); else takes the next
    # fence and adds our permit if fewer than `limit` others are live and none is live under
    # another limit. Output: one row (own fence, granted fence, live others, seconds left of
    # the soonest permit, stored limit); at most one of the fences is not NULL.
    @property
    def grant(self) -> str:
        return f"""
WITH {_NOW},
dropped AS (
    DELETE FROM {self.quoted} AS p USING now
    WHERE p.name = %(name)s AND p.token <> '' AND p.expires_at <= now.t
),
mine AS (
    UPDATE {self.quoted} AS p SET expires_at = now.t + %(ttl)s * interval '1 second'
    FROM now
    WHERE p.name = %(name)s AND p.token = %(token)s AND p.expires_at > now.t
    RETURNING p.fence
),
state AS (
    SELECT count(*) FILTER (WHERE p.token <> %(token)s) AS others,
           min(p.expires_at) AS soonest,
           (SELECT permits FROM {self.quoted} WHERE name = %(name)s AND token = '') AS stored
    FROM {self.quoted} AS p, now
    WHERE p.name = %(name)s AND p.token <> '' AND p.expires_at > now.t
),
bumped AS (
    UPDATE {self.quoted} AS rec
    SET fence = greatest(rec.fence + 1, {FENCE_FLOOR}), permits = %(limit)s
    FROM state, now
    WHERE rec.name = %(name)s AND rec.token = ''
      AND NOT EXISTS (SELECT 1 FROM mine)
      AND state.others < %(limit)s
      AND (state.others = 0 OR state.stored = %(limit)s)
    RETURNING rec.fence
),
{self._granted}
SELECT (SELECT fence FROM mine), (SELECT fence FROM granted), state.others,
       extract(epoch FROM state.soonest - now.t)::float8, state.stored
FROM state, now
"""

    # Inputs: name, token, channel. Ends our permit if live (expiry now, holder cleared: the
    # name's last use, see the module's doc); NOTIFYs waiters. Output: one row (true) if the
    # permit was live, none otherwise. A lapsed permit is left as it is: its expiry was its
    # end, and it no longer counts.
    @property
    def release(self) -> str:
        return f"""
WITH {_NOW},
ended AS (
    UPDATE {self.quoted} AS p SET {_ENDED}
    FROM now
    WHERE p.name = %(name)s AND p.token = %(token)s AND p.token <> '' AND p.expires_at > now.t
    RETURNING 1
)
SELECT true, pg_notify(%(channel)s, '{WAKE_PREFIX}' || %(name)s) FROM ended
"""

    # Inputs: names, tokens, ttls (arrays in step). Output: (name, token) of each permit
    # extended (it was live).
    @property
    def extend_many(self) -> str:
        return f"""
WITH {_NOW},
wanted AS (
    SELECT * FROM unnest(%(names)s::text[], %(tokens)s::text[], %(ttls)s::float8[])
        AS wanted(name, token, ttl)
)
UPDATE {self.quoted} AS p
SET expires_at = now.t + wanted.ttl * interval '1 second'
FROM now, wanted
WHERE p.name = wanted.name AND p.token = wanted.token AND p.token <> ''
  AND p.expires_at > now.t
RETURNING p.name, p.token
"""

    @property
    def owned(self) -> str:
        return f"""
WITH {_NOW}
SELECT 1 FROM {self.quoted} AS p, now
WHERE p.name = %(name)s AND p.token = %(token)s AND p.token <> '' AND p.expires_at > now.t
"""

    # Inputs: name, channel. Ends every live permit, as a release does; NOTIFYs waiters.
    # Output: one row per permit that was live.
    @property
    def break_semaphore(self) -> str:
        return f"""
WITH {_NOW},
ended AS (
    UPDATE {self.quoted} AS p SET {_ENDED}
    FROM now
    WHERE p.name = %(name)s AND p.token <> '' AND p.expires_at > now.t
    RETURNING 1
)
SELECT pg_notify(%(channel)s, '{WAKE_PREFIX}' || %(name)s) FROM ended
"""

    # Inputs: gc_after (seconds), limit. The clean-up: deletes the record and permit rows of
    # at most `limit` names whose every permit ended before IDLE_SINCE (a record without
    # permit rows, left by a tenure before rule 10, which deleted released permits, too).
    # Candidates come from the statement's snapshot; a record is then locked (other
    # sessions' locked records skipped) only if its fence is still the one read, and every
    # grant bumps it, so a name granted a permit since the snapshot is left alone. Holding
    # the record's lock, nothing can add a permit (grants go through it). Run in a
    # transaction with SWEEP_LOCK_TIMEOUT: an acquire locks expired permits before the
    # record, this the other way round. Output: one row (names deleted).
    @property
    def sweep(self) -> str:
        return f"""
WITH {_NOW},
candidates AS MATERIALIZED (
    SELECT rec.name, rec.fence FROM {self.quoted} AS rec, now
    WHERE rec.token = ''
      AND NOT EXISTS (
          SELECT 1 FROM {self.quoted} AS p
          WHERE p.name = rec.name AND p.token <> '' AND p.expires_at >= {IDLE_SINCE})
    LIMIT %(limit)s
),
locked AS MATERIALIZED (
    SELECT rec.name FROM {self.quoted} AS rec, candidates
    WHERE rec.name = candidates.name AND rec.token = '' AND rec.fence = candidates.fence
    FOR UPDATE OF rec SKIP LOCKED
),
permits_gone AS (
    DELETE FROM {self.quoted} AS p USING locked, now
    WHERE p.name = locked.name AND p.token <> '' AND p.expires_at < {IDLE_SINCE}
),
records_gone AS (
    DELETE FROM {self.quoted} AS rec USING locked
    WHERE rec.name = locked.name AND rec.token = ''
    RETURNING 1
)
SELECT count(*) FROM records_gone
"""

    # Input: name (inspect) or prefix (list). Output: one row per semaphore (name, fence,
    # limit) followed by its live permits as arrays, oldest grant first. One snapshot.
    def _info(self, where: str) -> str:
        return f"""
WITH {_NOW}
SELECT rec.name, rec.fence, rec.permits,
       array(SELECT p.host FROM {self.quoted} AS p
             WHERE p.name = rec.name AND p.token <> '' AND p.expires_at > now.t
             ORDER BY p.fence),
       array(SELECT p.pid FROM {self.quoted} AS p
             WHERE p.name = rec.name AND p.token <> '' AND p.expires_at > now.t
             ORDER BY p.fence),
       array(SELECT p.thread FROM {self.quoted} AS p
             WHERE p.name = rec.name AND p.token <> '' AND p.expires_at > now.t
             ORDER BY p.fence),
       array(SELECT p.acquired_at FROM {self.quoted} AS p
             WHERE p.name = rec.name AND p.token <> '' AND p.expires_at > now.t
             ORDER BY p.fence),
       array(SELECT extract(epoch FROM p.expires_at - now.t)::float8 FROM {self.quoted} AS p
             WHERE p.name = rec.name AND p.token <> '' AND p.expires_at > now.t
             ORDER BY p.fence),
       array(SELECT p.fence FROM {self.quoted} AS p
             WHERE p.name = rec.name AND p.token <> '' AND p.expires_at > now.t
             ORDER BY p.fence)
FROM {self.quoted} AS rec, now
WHERE rec.token = '' AND {where}
ORDER BY rec.name
"""

    @property
    def inspect(self) -> str:
        return self._info("rec.name = %(name)s")

    @property
    def list_semaphores(self) -> str:
        return self._info("starts_with(rec.name, %(prefix)s)")
