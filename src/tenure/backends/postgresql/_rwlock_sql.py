"""The SQL of PostgreSQL's read-write and fair locks, with each statement's contract above it.

Two tables beside the lock table, made on the first read-write (or fair) lock acquire:

- ``{table}_rwlocks``: one record row per name: ``fence`` (the last fence issued, shared by
  reads and writes, never going back) and ``arrivals`` (the last arrival position given to a
  waiting place). Its row lock serialises the acquires of the name.
- ``{table}_rwlock_entries``: one row per holder lease or waiting place, keyed (name, token):
  ``kind`` 'lease' or 'place', ``mode`` 'read' or 'write', ``seq`` (a lease's fence, a place's
  arrival position), ``expires_at`` by the server's clock, the holder's details (a place's
  are its waiter's, with ``acquired_at`` when the place was taken: ``tenure show`` lists
  them; NULL on a place an older tenure took), and ``fair``: true on a fair lock's entry,
  NULL on a read-write lock's (and on the rows of a tenure from before the column). Only
  ``inspect`` reads it, no grant does; a table made before it gets it in place
  (``add_fair``) from the first acquire, and the reads take it through ``to_jsonb`` of the
  row, NULL where the column is missing, so that they never need (nor make) the upgrade.

An acquire is one short transaction of two statements, sent together in one round trip
(pipelined): LOCK_NAME upserts the record row, which takes its row lock until the commit
(concurrent acquirers of the name queue there), and GRANT, a new statement with a new
snapshot under READ COMMITTED, which sees every entry committed before that lock was ours,
decides and writes. One statement could not do both: its snapshot is taken before it waits
for any row lock, so it would miss the entries a concurrent grant just added. Entries are
only ever added by GRANT, under the record's lock; the single-statement steps that change
entries without it (release, renewals, break) touch existing rows only, and GRANT reads the
name's entries ``FOR UPDATE``, which waits for such a change to commit and then sees the
row's latest version (a renewal that landed just as the lease was ending is not mistaken
for an expired lease). Every statement that locks entry rows locks them in (name, token)
order, so two of them never wait for each other in a cycle.

Time is the server's ``clock_timestamp()``, once per statement. A release, a break and an
acquire that dropped a lapsed lease or place NOTIFY the lock table's channel with
``rwlock:`` and the name, so the waiters' one LISTEN connection serves these locks too.

Fences and clean-up (rule 10): a grant's fence is max(the record's fence + 1, the server's
clock in microseconds), in GRANT, so fences never go back even when the record is gone. A
release (or a break) ends its entry (expiry set to now, holder cleared) instead of deleting
it: ended entries record when the name was last used, until the next GRANT of the name drops
them (without a NOTIFY: their release already sent one) or SWEEP removes the name. SWEEP
deletes a name's record and entries when every entry ended more than ``gc_after`` ago.

Parameters are psycopg's ``%(name)s``: ``name``/``token`` text, ``ttl``/``queue_ttl`` float
seconds, ``mode`` 'read' or 'write', ``host``/``thread`` text, ``pid`` integer, ``channel``
the NOTIFY channel (the lock table's name).
"""

from __future__ import annotations

import dataclasses
import functools

from tenure.backends.postgresql._sql import ENDED, FENCE_FLOOR, IDLE_SINCE, NOW, ending, renewing

__all__ = ["WAKE_PREFIX", "RwlockStatements"]

WAKE_PREFIX = "rwlock:"
_WAKE = f"'{WAKE_PREFIX}' || %(name)s"
"""The NOTIFY payload of a release, a break or a grant that dropped a lapsed entry."""


@dataclasses.dataclass(frozen=True)
class RwlockStatements:
    table: str
    """The lock table's validated name; the two tables are named after it (within
    PostgreSQL's 63-character identifiers)."""

    @functools.cached_property
    def records(self) -> str:
        return f"{self.table[:55]}_rwlocks"

    @functools.cached_property
    def entries(self) -> str:
        return f"{self.table[:48]}_rwlock_entries"

    @functools.cached_property
    def quoted_records(self) -> str:
        return f'"{self.records}"'

    @functools.cached_property
    def quoted_entries(self) -> str:
        return f'"{self.entries}"'

    # Inputs: entries (the entries table's quoted name, as text). Output: one row (exists,
    # it has the fair column). The entries table is made last, so its existence means both
    # are there. Read-only.
    @functools.cached_property
    def exists(self) -> str:
        return (
            "SELECT to_regclass(%(entries)s) IS NOT NULL, EXISTS (SELECT 1 FROM pg_attribute "
            "WHERE attrelid = to_regclass(%(entries)s) AND attname = 'fair' "
            "AND NOT attisdropped)"
        )

    # Run under the lock table's `create_lock`, after `exists` found the entries table
    # without the fair column. IF NOT EXISTS: a process that raced us there changes nothing.
    # Nullable, no default: only the catalogue changes, no row is rewritten.
    @functools.cached_property
    def add_fair(self) -> str:
        return f"ALTER TABLE {self.quoted_entries} ADD COLUMN IF NOT EXISTS fair boolean"

    # Run in one transaction after the lock table's creation lock (``Statements.create_lock``).
    # Room left in each page (fillfactor), as in the lock table: every attempt rewrites the
    # record row and renews rows in place, and none of that changes an indexed column, so
    # the new versions stay in the same page (HOT updates) and the indexes are not touched.
    @functools.cached_property
    def create(self) -> tuple[str, str]:
        return (
            f"""
CREATE TABLE IF NOT EXISTS {self.quoted_records} (
    name     text COLLATE "C" PRIMARY KEY,
    fence    bigint NOT NULL,
    arrivals bigint NOT NULL
) WITH (fillfactor = 70)
""",
            f"""
CREATE TABLE IF NOT EXISTS {self.quoted_entries} (
    name        text COLLATE "C" NOT NULL,
    token       text COLLATE "C" NOT NULL,
    kind        text NOT NULL CHECK (kind IN ('lease', 'place')),
    mode        text NOT NULL CHECK (mode IN ('read', 'write')),
    seq         bigint NOT NULL,
    expires_at  timestamptz NOT NULL,
    acquired_at timestamptz,
    host        text,
    pid         bigint,
    thread      text,
    fair        boolean,
    PRIMARY KEY (name, token)
) WITH (fillfactor = 70)
""",
        )

    # Input: name. Creates the record row if absent and takes its row lock until the
    # transaction ends. Output: one row.
    @functools.cached_property
    def lock_name(self) -> str:
        return f"""
INSERT INTO {self.quoted_records} AS rec (name, fence, arrivals) VALUES (%(name)s, 0, 0)
ON CONFLICT (name) DO UPDATE SET fence = rec.fence
RETURNING rec.fence
"""

    # Inputs: name, token, ttl, queue_ttl, mode, host, pid, thread, fair (true or NULL),
    # channel; run holding the
    # name's record lock (LOCK_NAME, same transaction). In one statement:
    # 1. Locks the name's entries (token order) and drops the lapsed ones, except the
    #    caller's own, which is overwritten below instead (one statement must not change a
    #    row twice).
    # 2. A live lease of `token` (a retry): its expiry reset to now + ttl, fence kept.
    # 3. Otherwise grantable when no live lease and no live place ahead blocks it: for
    #    'write', any lease or place ahead; for 'read', a 'write' lease or a 'write' place
    #    ahead. "Ahead" = places with an arrival before the caller's own live place (all of
    #    them when it has none).
    # 4. Grantable: max(the record's fence + 1, FENCE_FLOOR), and the caller's row becomes
    #    a lease with it
    #    (its place, or a lapsed entry of its own, overwritten).
    # 5. Not grantable: a live place of the caller gets its expiry reset to now + queue_ttl,
    #    keeping its position; without one, a place at the tail (the record's arrivals + 1).
    # 6. If a lapsed lease or place was dropped, NOTIFY (it may have held a waiter back);
    #    ended entries (released or broken) sent theirs then.
    # Output: one row (renewed fence, granted fence, seconds left of the soonest-ending live
    # lease, woken); at most one of the fences is not NULL.
    @functools.cached_property
    def grant(self) -> str:
        entries, records = self.quoted_entries, self.quoted_records
        return f"""
WITH {NOW},
locked AS MATERIALIZED (
    SELECT e.token, e.kind, e.mode, e.seq, e.expires_at, e.pid
    FROM {entries} AS e WHERE e.name = %(name)s
    ORDER BY e.token FOR UPDATE
),
live AS MATERIALIZED (
    SELECT locked.* FROM locked, now WHERE locked.expires_at > now.t
),
dropped AS (
    DELETE FROM {entries} AS e USING locked, now
    WHERE e.name = %(name)s AND e.token = locked.token
      AND locked.expires_at <= now.t AND locked.token <> %(token)s
    RETURNING e.token, locked.pid
),
mine AS MATERIALIZED (
    SELECT EXISTS (SELECT 1 FROM live WHERE token = %(token)s AND kind = 'lease') AS retry,
           (SELECT seq FROM live WHERE token = %(token)s AND kind = 'place') AS place
),
verdict AS MATERIALIZED (
    SELECT mine.retry, mine.place,
           NOT mine.retry AND NOT EXISTS (
               SELECT 1 FROM live AS other
               WHERE other.token <> %(token)s
                 AND (%(mode)s = 'write' OR other.mode = 'write')
                 AND (other.kind = 'lease' OR (other.seq < mine.place) IS NOT FALSE)
           ) AS grantable
    FROM mine
),
renewed AS (
    UPDATE {entries} AS e SET expires_at = now.t + %(ttl)s * interval '1 second'
    FROM now, verdict
    WHERE verdict.retry AND e.name = %(name)s AND e.token = %(token)s
    RETURNING e.seq
),
counted AS (
    UPDATE {records} AS rec
    SET fence = CASE WHEN verdict.grantable THEN greatest(rec.fence + 1, {FENCE_FLOOR})
                     ELSE rec.fence END,
        arrivals = rec.arrivals + CASE WHEN verdict.grantable THEN 0 ELSE 1 END
    FROM verdict, now
    WHERE rec.name = %(name)s
      AND (verdict.grantable OR (NOT verdict.retry AND verdict.place IS NULL))
    RETURNING verdict.grantable, rec.fence, rec.arrivals
),
written AS (
    INSERT INTO {entries} AS e
        (name, token, kind, mode, seq, expires_at, acquired_at, host, pid, thread, fair)
    SELECT %(name)s, %(token)s,
           CASE WHEN counted.grantable THEN 'lease' ELSE 'place' END, %(mode)s,
           CASE WHEN counted.grantable THEN counted.fence ELSE counted.arrivals END,
           now.t + CASE WHEN counted.grantable THEN %(ttl)s ELSE %(queue_ttl)s END
                   * interval '1 second',
           now.t, %(host)s, %(pid)s, %(thread)s, %(fair)s::boolean
    FROM counted, now
    ON CONFLICT (name, token) DO UPDATE SET
        kind = excluded.kind, mode = excluded.mode, seq = excluded.seq,
        expires_at = excluded.expires_at, acquired_at = excluded.acquired_at,
        host = excluded.host, pid = excluded.pid, thread = excluded.thread,
        fair = excluded.fair
    RETURNING e.kind, e.seq
),
refreshed AS (
    UPDATE {entries} AS e SET expires_at = now.t + %(queue_ttl)s * interval '1 second'
    FROM now, verdict
    WHERE NOT verdict.grantable AND verdict.place IS NOT NULL
      AND e.name = %(name)s AND e.token = %(token)s
),
woken AS (
    SELECT pg_notify(%(channel)s, {_WAKE})
    FROM (SELECT 1 FROM dropped WHERE dropped.pid IS NOT NULL LIMIT 1) AS any_dropped
)
SELECT (SELECT seq FROM renewed),
       (SELECT seq FROM written WHERE kind = 'lease'),
       (SELECT extract(epoch FROM min(live.expires_at) - now.t)::float8
        FROM live WHERE live.kind = 'lease' AND live.token <> %(token)s),
       (SELECT count(*) FROM woken)
FROM now
"""

    # Inputs: name, token, channel. Ends the token's live lease or place (see the module's
    # doc); NOTIFYs waiters. Output: one row (whether it was a lease) if one was live, none
    # otherwise. A lapsed one is left as it is: it no longer counts, and its expiry was its
    # end. Locks only the token's own row.
    @functools.cached_property
    def release(self) -> str:
        return ending(
            f"{self.quoted_entries} AS e", ENDED,
            "e.name = %(name)s AND e.token = %(token)s AND e.expires_at > now.t",
            _WAKE, returning="e.kind", answer="ended.kind = 'lease', ",
        )

    # See `renewing`: each live lease, locking the rows in (name, token) order first (see
    # the module's docstring).
    # An ended entry keeps its token and, as expires_at, the time it ended: a statement that
    # read the clock, then waited for the row while a release or break ended it, would see
    # that end after its now and take the entry for live (and revive it). pid NULL marks
    # it ended.
    @functools.cached_property
    def extend_many(self) -> str:
        locked = f""",
locked AS MATERIALIZED (
    SELECT e.name, e.token FROM {self.quoted_entries} AS e, wanted
    WHERE e.name = wanted.name AND e.token = wanted.token AND e.kind = 'lease'
    ORDER BY e.name, e.token FOR UPDATE OF e
)"""
        live = """
  AND locked.name = e.name AND locked.token = e.token
  AND e.kind = 'lease' AND e.expires_at > now.t AND e.pid IS NOT NULL"""
        return renewing(
            self.quoted_entries, "e", live, locked=locked, using="now, wanted, locked"
        )

    # Inputs: name, token. Output: a row if the token holds a live lease. Read-only.
    @functools.cached_property
    def owned(self) -> str:
        return f"""
WITH {NOW}
SELECT 1 FROM {self.quoted_entries} AS e, now
WHERE e.name = %(name)s AND e.token = %(token)s AND e.kind = 'lease' AND e.expires_at > now.t
  AND e.pid IS NOT NULL
"""

    # Inputs: name, channel. Ends every live lease of the name as a release does (places
    # stay, the record's fence stays), locking them in token order; NOTIFYs waiters if one
    # was live. Output: one row per live lease ended.
    @functools.cached_property
    def break_queue(self) -> str:
        entries = self.quoted_entries
        locked = f"""
locked AS MATERIALIZED (
    SELECT e.token FROM {entries} AS e
    WHERE e.name = %(name)s AND e.kind = 'lease'
    ORDER BY e.token FOR UPDATE
),"""
        return ending(
            f"{entries} AS e", ENDED,
            "e.name = %(name)s AND e.token = locked.token AND e.kind = 'lease'\n"
            "      AND e.expires_at > now.t",
            _WAKE, locked=locked, using="locked, now",
        )

    # Inputs: gc_after (seconds), limit. The clean-up: deletes the record and entries of
    # at most `limit` names whose every entry ended (expired, released) before IDLE_SINCE; a
    # record without entries (a tenure before rule 10 deleted them) is idle too. Candidates
    # come from the statement's snapshot; a record is then locked (records other sessions
    # hold, such as a GRANT's, skipped) only if its fence and arrivals are still the ones
    # read. A grant or a new place bumps one of them, and entries are only ever added or
    # revived by GRANT, under the record's lock: a name used since the snapshot is left
    # alone, and nothing can be added to a locked one. Locks the record, then entries, in
    # GRANT's order. Output: one row (names deleted).
    @functools.cached_property
    def sweep(self) -> str:
        entries, records = self.quoted_entries, self.quoted_records
        return f"""
WITH {NOW},
candidates AS MATERIALIZED (
    SELECT rec.name, rec.fence, rec.arrivals FROM {records} AS rec, now
    WHERE NOT EXISTS (
        SELECT 1 FROM {entries} AS e
        WHERE e.name = rec.name AND e.expires_at >= {IDLE_SINCE})
    LIMIT %(limit)s
),
locked AS MATERIALIZED (
    SELECT rec.name FROM {records} AS rec, candidates
    WHERE rec.name = candidates.name AND rec.fence = candidates.fence
      AND rec.arrivals = candidates.arrivals
    FOR UPDATE OF rec SKIP LOCKED
),
entries_gone AS (
    DELETE FROM {entries} AS e USING locked, now
    WHERE e.name = locked.name AND e.expires_at < {IDLE_SINCE}
),
records_gone AS (
    DELETE FROM {records} AS rec USING locked
    WHERE rec.name = locked.name
    RETURNING 1
)
SELECT count(*) FROM records_gone
"""

    # Input: name (inspect) or prefix (list). Output: one row per record (name, fence,
    # live places, live leases as a JSON array oldest grant first, each [mode, host, pid,
    # thread, acquired_at epoch seconds, seconds left, fence, fair] or NULL, live places as
    # a JSON array in arrival order, each [mode, host, pid, thread, taken at epoch seconds,
    # fair] or NULL), by name. One snapshot; blocks no writer. ``fair`` is read as
    # ``to_jsonb(row) ->> 'fair'``: NULL on a table from before the column.
    def _info(self, where: str) -> str:
        entries = self.quoted_entries
        return f"""
WITH {NOW}
SELECT rec.name, rec.fence,
       (SELECT count(*) FROM {entries} AS p
        WHERE p.name = rec.name AND p.kind = 'place' AND p.expires_at > now.t),
       (SELECT json_agg(json_build_array(
                   l.mode, l.host, l.pid, l.thread,
                   extract(epoch FROM l.acquired_at)::float8,
                   extract(epoch FROM l.expires_at - now.t)::float8, l.seq,
                   (to_jsonb(l) ->> 'fair')::boolean)
               ORDER BY l.seq)
        FROM {entries} AS l
        WHERE l.name = rec.name AND l.kind = 'lease' AND l.expires_at > now.t),
       (SELECT json_agg(json_build_array(
                   w.mode, w.host, w.pid, w.thread,
                   extract(epoch FROM w.acquired_at)::float8,
                   (to_jsonb(w) ->> 'fair')::boolean)
               ORDER BY w.seq)
        FROM {entries} AS w
        WHERE w.name = rec.name AND w.kind = 'place' AND w.expires_at > now.t)
FROM {self.quoted_records} AS rec, now
WHERE {where}
ORDER BY rec.name
"""

    @functools.cached_property
    def inspect(self) -> str:
        return self._info("rec.name = %(name)s")

    # starts_with() compares text: a LIKE pattern would read % and _ as wildcards.
    @functools.cached_property
    def list_queues(self) -> str:
        return self._info("starts_with(rec.name, %(prefix)s)")
