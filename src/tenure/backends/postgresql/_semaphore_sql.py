"""The SQL of PostgreSQL's semaphores, with each statement's contract above it.

One table beside the lock table, ``{table}_permits``, keyed (name, token). The semaphore's
own record is the row whose token is ``''`` (its fence counter, and the limit stored with
its live permits; no expiry). Its permits live in slot rows, reused in place: a slot row's
key token is ``#`` and a number (``SLOT_MARK``; a permit's own token, 32 hex digits, never
starts so), and the permit that holds it is named by ``holder_token``, a column outside the
key. So a grant, a release and an extend update columns no index covers, and PostgreSQL
writes those updates as HOT updates: no new index entry, and the dead row versions are
pruned from the page by the next statement that reads it, so a name's rows stay on a page
or two however often it is used. (Before slot rows, each permit was a row keyed by its own
token, inserted by the grant and deleted by a later acquire: a new index entry each time,
and a table that grew with dead rows between vacuums, which every acquire scanned.)

A slot row is live while its expiry is in the future; the grant takes a slot row that is
not (ended or expired), or adds the next slot when every one is live; a name has no more
slot rows than permits it had live at once. A table made before slot rows gets the column
added in place, ``add_columns`` (nullable, no default: a change of the catalogue only),
and tenures from before it keep working on it beside this one: they count every live row of
a name whatever its key, take permits as rows keyed by their own tokens, which this tenure
counts as live permits too (and drops once expired, as they did), and drop ended slot rows
as expired permits, which this tenure then adds again.

Fences and clean-up (rule 10): a grant's fence is max(the record's fence + 1, the server's
clock in microseconds), in the granting statement, so fences never go back even when the
record is gone. A release ends its permit (expiry set to now, holder cleared; the token
left) instead of deleting it: the ended row is the time the name was last used. A name's
slot rows stay while it is in use. SWEEP deletes a name's record and its permit rows when
every permit ended more than ``gc_after`` ago.

A grant needs a count of the live permits that no concurrent grant can change before the
grant is written. One statement under READ COMMITTED reads its rows from the snapshot taken
when it starts, before any row lock it then waits for, so it cannot hold the count still; it
can detect that the count moved, though, because only a grant makes a permit live and every
grant bumps the record's fence. So an acquire first tries ACQUIRE, one statement: it counts
the live permits and reads the record's fence in its snapshot, then upserts the record with
that fence + 1 on the condition that the fence is still the one it read, a condition
PostgreSQL judges on the latest committed version of the row, after waiting for its lock; and
it takes its slot on the condition that the slot is still not live, judged the same way (an
extend that began before the slot's permit expired may have made it live again). If either
moved, ACQUIRE grants nothing and says so (a fence bumped without a grant is only a fence
skipped), and the acquire decides again in one short transaction of two statements that
cannot race: LOCK_NAME takes the record's row lock (concurrent acquirers of the name queue
there) and GRANT, a new statement with a new snapshot that sees every permit committed
before the lock was ours, decides and writes. The count can only be too high by the
snapshot's age (permits released or expired meanwhile still counted), which errs towards
Busy; the waiter then wakes on the release's NOTIFY. Every other step is one statement.
Time is the server's ``clock_timestamp()``, once per statement.

A release and a break NOTIFY the lock table's channel with ``semaphore:`` and the name, so
the waiters' one LISTEN connection serves semaphores too (a lock whose own name starts
so only gets a spurious wake-up).

Weighted FIFO permits (the store offers "weighted"): a permit row carries its ``weight``
(NULL, as a tenure from before weights wrote it, reads as 1), and a permit is granted iff
the units of the live permits, plus the weights of the live waiting places ahead of the
attempt (every live place, for an attempt without one), plus its weight stay within the
limit. A refused attempt keeps a waiting place: a row of the same table keyed by
``PLACE_MARK`` and its token (so never a slot's or a permit's key), with its weight, its
waiter (host, pid, thread, ``acquired_at`` as the time it was placed), its expiry (now +
queue_ttl, refreshed by each of its tries) and its ``arrival`` position (the name's
highest + 1, given under the record's row lock). Places are only written by GRANT, under
that lock; a grant deletes its own place, a release of its token (an attempt giving up)
deletes it too, and GRANT drops lapsed ones (their waiter died). So the fast ACQUIRE grants
only while the name has no place row at all; with a queue, every try is LOCK_NAME + GRANT.
GRANT NOTIFYs when it dropped a lapsed place or granted a waiter whose place others stood
behind (either may be what held the next one back), as a release does. The ``weight`` and
``arrival`` columns are added in place with ``holder_token`` (``add_columns``); reads take
them through ``to_jsonb`` of the row, NULL where missing, so inspecting needs no upgrade. A
tenure from before weights, beside this one, counts each live place and each weighted
permit as one permit (it never exceeds the limit with weight-1 permits alone).
"""

from __future__ import annotations

import dataclasses
import functools

from tenure.backends.postgresql._sql import ENDED, FENCE_FLOOR, IDLE_SINCE, NOW, ending, renewing

__all__ = ["ADDED_COLUMNS", "HOLDER_TOKEN", "PLACE_MARK", "SLOT_MARK", "WAKE_PREFIX",
           "SemaphoreStatements"]

WAKE_PREFIX = "semaphore:"
SLOT_MARK = "#"
"""How a slot row's key token starts (then the slot's number); no permit token does."""
HOLDER_TOKEN = "holder_token"
"""The column naming the permit that holds a slot row, added by ``add_columns`` to a
table made before slot rows."""
PLACE_MARK = ">"
"""How a waiting place's key token starts (then its waiter's token)."""
ADDED_COLUMNS = (
    (HOLDER_TOKEN, 'text COLLATE "C"'), ("weight", "integer"), ("arrival", "bigint"),
)
"""The columns added after the table was first made, each nullable without a default (a
change of the catalogue only): a slot's holder, a permit's or place's weight, a place's
arrival position."""
_SLOT = f"starts_with(p.token, '{SLOT_MARK}')"
_PLACE = f"starts_with(p.token, '{PLACE_MARK}')"
_PERMIT = f"p.token <> '' AND NOT {_PLACE}"
"""A permit row: a slot row, or one keyed by its permit's own token."""
_OLD_PERMIT = f"{_PERMIT} AND NOT {_SLOT}"
"""A permit row keyed by its own token: taken by a tenure from before slot rows."""
_MY_PLACE = f"p.token = '{PLACE_MARK}' || %(token)s"
_WEIGHT = "coalesce((to_jsonb(p) ->> 'weight')::integer, 1)"
"""A row's weight in a read that may run on a table without the column (1 then)."""
_WAKE = f"'{WAKE_PREFIX}' || %(name)s"
"""The NOTIFY payload of a release or a break."""
_LIVE_PERMITS = f"p.name = rec.name AND {_PERMIT} AND p.expires_at > now.t"
_LIVE_PLACES = f"p.name = rec.name AND {_PLACE} AND p.expires_at > now.t"
_PERMIT_INFO = (
    "p.host", "p.pid", "p.thread", "p.acquired_at",
    "extract(epoch FROM p.expires_at - now.t)::float8", "p.fence", _WEIGHT,
)
"""What ``_info`` lists of each live permit, one array per item."""
_PLACE_INFO = ("p.host", "p.pid", "p.thread", "p.acquired_at", _WEIGHT)
"""What ``_info`` lists of each live place, one array per item, in arrival order."""


@dataclasses.dataclass(frozen=True)
class SemaphoreStatements:
    table: str
    """The lock table's validated name; the permits table is named after it."""

    @functools.cached_property
    def permits(self) -> str:
        return f"{self.table[:55]}_permits"

    @functools.cached_property
    def quoted(self) -> str:
        return f'"{self.permits}"'

    # Inputs: permits (the quoted name, as text). Output: one row (the table exists, it has
    # every ADDED_COLUMNS column). Read-only.
    @functools.cached_property
    def exists(self) -> str:
        names = ", ".join(f"'{column}'" for column, _ in ADDED_COLUMNS)
        return (
            "SELECT to_regclass(%(permits)s) IS NOT NULL, (SELECT count(*) FROM pg_attribute "
            f"WHERE attrelid = to_regclass(%(permits)s) AND attname IN ({names}) "
            f"AND NOT attisdropped) = {len(ADDED_COLUMNS)}"
        )

    # fillfactor: room on each page for the HOT updates of its slot rows.
    @functools.cached_property
    def create(self) -> str:
        return f"""
CREATE TABLE IF NOT EXISTS {self.quoted} (
    name         text COLLATE "C" NOT NULL,
    token        text COLLATE "C" NOT NULL,
    fence        bigint NOT NULL,
    permits      integer,
    expires_at   timestamptz,
    acquired_at  timestamptz,
    host         text,
    pid          bigint,
    thread       text,
    {HOLDER_TOKEN} text COLLATE "C",
    weight       integer,
    arrival      bigint,
    PRIMARY KEY (name, token)
) WITH (fillfactor = 70)
"""

    # Run under the lock table's `create_lock`, after `exists` found the table without one
    # of ADDED_COLUMNS (made before slot rows, or before weights). IF NOT EXISTS: a column
    # already there, or added by a process that raced us, changes nothing. Nullable, no
    # default: only the catalogue changes, no row is rewritten; the table's lock is held
    # just that long. The fillfactor applies to pages written from now on.
    @functools.cached_property
    def add_columns(self) -> str:
        added = ", ".join(
            f"ADD COLUMN IF NOT EXISTS {column} {kind}" for column, kind in ADDED_COLUMNS
        )
        return f"ALTER TABLE {self.quoted} {added}, SET (fillfactor = 70)"

    # The CTE both grants start with: one read of the name's rows (record, permits, places).
    # others, units: live permits but ours, and their weights; expired: permits keyed by
    # their own tokens that are no longer live; mine: our live permit's fence; soonest: the
    # soonest end of a live permit; fence, stored: the record's; free: a slot row that is
    # not live, if any; next: the key of a new slot (the highest slot's number + 1);
    # places: place rows, live or lapsed; waiting: live places; place: our live place's
    # arrival; tail: the highest arrival; lapsed: lapsed places but ours. `dropped` deletes
    # the expired permits keyed by their own tokens and (`places`, GRANT only: under the
    # record's lock) the lapsed places but ours, which GRANT writes again instead (one
    # statement must not change a row twice).
    def _state(self, *, places: bool) -> str:
        live_permit = f"{_PERMIT} AND p.expires_at > now.t"
        others = f"{live_permit} AND p.{HOLDER_TOKEN} IS DISTINCT FROM %(token)s"
        lapsed = f"{_PLACE} AND p.expires_at <= now.t AND NOT {_MY_PLACE}"
        drop = f"(SELECT expired FROM state) > 0 AND {_OLD_PERMIT} AND p.expires_at <= now.t"
        if places:
            drop = f"({drop}) OR ((SELECT lapsed FROM state) > 0 AND {lapsed})"
        return f"""state AS MATERIALIZED (
    SELECT count(*) FILTER (WHERE {others}) AS others,
           coalesce(sum(coalesce(p.weight, 1)) FILTER (WHERE {others}), 0) AS units,
           count(*) FILTER (WHERE {_OLD_PERMIT} AND p.expires_at <= now.t) AS expired,
           max(p.fence) FILTER (WHERE p.{HOLDER_TOKEN} = %(token)s AND p.expires_at > now.t)
               AS mine,
           min(p.expires_at) FILTER (WHERE {live_permit}) AS soonest,
           max(p.fence) FILTER (WHERE p.token = '') AS fence,
           max(p.permits) FILTER (WHERE p.token = '') AS stored,
           min(p.token) FILTER (WHERE {_SLOT} AND p.expires_at <= now.t) AS free,
           '{SLOT_MARK}' || (coalesce(max(CASE WHEN {_SLOT} THEN substr(p.token, 2)::integer
                                                END), 0) + 1) AS next,
           count(*) FILTER (WHERE {_PLACE}) AS places,
           count(*) FILTER (WHERE {_PLACE} AND p.expires_at > now.t) AS waiting,
           max(p.arrival) FILTER (WHERE {_MY_PLACE} AND p.expires_at > now.t) AS place,
           max(p.arrival) FILTER (WHERE {_PLACE}) AS tail,
           count(*) FILTER (WHERE {lapsed}) AS lapsed
    FROM {self.quoted} AS p, now
    WHERE p.name = %(name)s
),
dropped AS (
    DELETE FROM {self.quoted} AS p USING now
    WHERE p.name = %(name)s AND ({drop})
    RETURNING p.token
),
mine AS (
    UPDATE {self.quoted} AS p SET expires_at = now.t + %(ttl)s * interval '1 second'
    FROM now
    WHERE (SELECT mine FROM state) IS NOT NULL
      AND p.name = %(name)s AND p.{HOLDER_TOKEN} = %(token)s AND p.expires_at > now.t
    RETURNING p.fence
)"""

    # The CTE both grants end with: our permit in the free slot row (or a new one), with the
    # fence `bumped` returned (none if it returned no row), provided the slot is still not
    # live when its row lock is ours (the conflict clause's WHERE is judged on the row's
    # latest version).
    @functools.cached_property
    def _granted(self) -> str:
        return f"""granted AS (
    INSERT INTO {self.quoted} AS p
        (name, token, fence, expires_at, acquired_at, host, pid, thread, {HOLDER_TOKEN},
         weight, arrival)
    SELECT %(name)s, coalesce(state.free, state.next), bumped.fence,
           now.t + %(ttl)s * interval '1 second', now.t, %(host)s, %(pid)s, %(thread)s,
           %(token)s, %(weight)s, NULL
    FROM bumped, state, now
    ON CONFLICT (name, token) DO UPDATE SET
        fence = excluded.fence, expires_at = excluded.expires_at,
        acquired_at = excluded.acquired_at, host = excluded.host, pid = excluded.pid,
        thread = excluded.thread, {HOLDER_TOKEN} = excluded.{HOLDER_TOKEN},
        weight = excluded.weight, arrival = NULL
    WHERE p.expires_at <= excluded.acquired_at
    RETURNING p.fence
)"""

    # Inputs: name, token, ttl, limit, weight, host, pid, thread; one statement in
    # autocommit (see the module's doc). Drops expired permits keyed by their own tokens;
    # restarts our own live permit (a retry); else, if the name has no place row (nobody
    # queues), the live others' units + weight fit the limit and none is live under another
    # limit, takes the next fence (max(fence + 1, FENCE_FLOOR)) and a slot, provided the
    # record's fence is still the one this statement's snapshot holds (the conflict
    # clause's WHERE is judged on the row's latest version, locked), and the slot is still
    # not live. Output: one row (own fence, granted fence, live others, seconds left of the
    # soonest permit, stored limit, room, queue); at most one of the fences is not NULL.
    # Neither, with room (the fence or the slot moved) or queue (the name has place rows):
    # decide with LOCK_NAME + GRANT, as a refusal that must take a place does.
    @functools.cached_property
    def acquire(self) -> str:
        return f"""
WITH {NOW},
{self._state(places=False)},
room AS (
    SELECT state.fence AS fence FROM state
    WHERE NOT EXISTS (SELECT 1 FROM mine)
      AND state.places = 0
      AND state.units + %(weight)s <= %(limit)s
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
       EXISTS (SELECT 1 FROM room), state.places > 0
FROM state, now
"""

    # Inputs: name, limit. Creates the record row if absent and takes its row lock until the
    # transaction ends (a conflict clause locks the row even when its WHERE then refuses the
    # update, so no new row version is written). Output: none.
    @functools.cached_property
    def lock_name(self) -> str:
        return f"""
INSERT INTO {self.quoted} AS rec (name, token, fence, permits) VALUES (%(name)s, '', 0, %(limit)s)
ON CONFLICT (name, token) DO UPDATE SET fence = rec.fence WHERE false
"""

    # Inputs: name, token, ttl, queue_ttl (NULL: take no place), limit, weight, host, pid,
    # thread, channel; run holding the name's row lock. In one statement:
    # 1. Drops expired permits keyed by their own tokens and lapsed places but ours.
    # 2. Our own live permit (a retry): its expiry restarts, its fence stays.
    # 3. Otherwise grantable iff the live others' units + the weights of the live places
    #    ahead of ours (every live place, when we have none) + weight <= limit, and none
    #    is live under another limit: the next fence and a slot, and our place goes.
    # 4. Not grantable (and no limit mismatch, and a queue_ttl): our place, its expiry now +
    #    queue_ttl; a live one keeps its arrival, else (new, or lapsed) it gets the tail's + 1.
    # 5. NOTIFY if a lapsed place went, or our place went while others wait behind it.
    # Output: one row (own fence, granted fence, live others, seconds left of the soonest
    # permit, stored limit); at most one of the fences is not NULL (both NULL and
    # grantable: an extend revived the slot, see the module's doc; the place stays).
    @functools.cached_property
    def grant(self) -> str:
        return f"""
WITH {NOW},
{self._state(places=True)},
ahead AS MATERIALIZED (
    SELECT coalesce(sum(coalesce(p.weight, 1)), 0) AS units
    FROM {self.quoted} AS p, now, state
    WHERE p.name = %(name)s AND {_PLACE} AND p.expires_at > now.t AND NOT {_MY_PLACE}
      AND (state.place IS NULL OR p.arrival < state.place)
),
verdict AS MATERIALIZED (
    SELECT NOT EXISTS (SELECT 1 FROM mine)
           AND state.units + ahead.units + %(weight)s <= %(limit)s
           AND (state.others = 0 OR state.stored = %(limit)s) AS grantable,
           state.others > 0 AND state.stored IS DISTINCT FROM %(limit)s AS mismatch
    FROM state, ahead
),
bumped AS (
    UPDATE {self.quoted} AS rec
    SET fence = greatest(rec.fence + 1, {FENCE_FLOOR}), permits = %(limit)s
    FROM verdict, now
    WHERE rec.name = %(name)s AND rec.token = '' AND verdict.grantable
    RETURNING rec.fence
),
{self._granted},
left_queue AS (
    DELETE FROM {self.quoted} AS p
    WHERE EXISTS (SELECT 1 FROM granted) AND p.name = %(name)s AND {_MY_PLACE}
    RETURNING 1
),
placed AS (
    INSERT INTO {self.quoted} AS p
        (name, token, fence, expires_at, acquired_at, host, pid, thread, weight, arrival)
    SELECT %(name)s, '{PLACE_MARK}' || %(token)s, 0,
           now.t + %(queue_ttl)s::float8 * interval '1 second', now.t,
           %(host)s, %(pid)s, %(thread)s, %(weight)s, coalesce(state.tail, 0) + 1
    FROM verdict, state, now
    WHERE NOT verdict.grantable AND NOT verdict.mismatch AND state.mine IS NULL
      AND %(queue_ttl)s::float8 IS NOT NULL
    ON CONFLICT (name, token) DO UPDATE SET
        expires_at = excluded.expires_at, weight = excluded.weight,
        host = excluded.host, pid = excluded.pid, thread = excluded.thread,
        acquired_at = CASE WHEN p.expires_at > excluded.acquired_at THEN p.acquired_at
                           ELSE excluded.acquired_at END,
        arrival = CASE WHEN p.expires_at > excluded.acquired_at THEN p.arrival
                       ELSE excluded.arrival END
    RETURNING 1
),
woken AS (
    SELECT pg_notify(%(channel)s, {_WAKE}) FROM state
    WHERE EXISTS (SELECT 1 FROM dropped WHERE starts_with(dropped.token, '{PLACE_MARK}'))
       OR (EXISTS (SELECT 1 FROM left_queue) AND state.waiting > 1)
)
SELECT (SELECT fence FROM mine), (SELECT fence FROM granted), state.others,
       extract(epoch FROM state.soonest - now.t)::float8, state.stored,
       (SELECT count(*) FROM placed), (SELECT count(*) FROM woken)
FROM state, now
"""

    # Inputs: name, token, channel. Ends our permit if live (expiry now, holder cleared: the
    # name's last use, see the module's doc), and deletes our waiting place if any (an
    # attempt that gives up); NOTIFYs waiters if either was live. Output: one row (whether
    # a permit was live) if either was, none otherwise. A lapsed permit is left as it is:
    # its expiry was its end, and it no longer counts. Needs none of ADDED_COLUMNS but
    # holder_token (only a table with them all holds a permit of ours).
    @functools.cached_property
    def release(self) -> str:
        return f"""
WITH {NOW},
ended AS (
    UPDATE {self.quoted} AS p SET {ENDED}
    FROM now
    WHERE p.name = %(name)s AND p.{HOLDER_TOKEN} = %(token)s AND p.expires_at > now.t
    RETURNING 1
),
left_queue AS (
    DELETE FROM {self.quoted} AS p USING now
    WHERE p.name = %(name)s AND {_MY_PLACE}
    RETURNING p.expires_at > now.t AS live
)
SELECT EXISTS (SELECT 1 FROM ended), pg_notify(%(channel)s, {_WAKE})
WHERE EXISTS (SELECT 1 FROM ended) OR EXISTS (SELECT 1 FROM left_queue WHERE live)
"""

    # See `renewing`: each permit still live.
    # An ended entry keeps its token and, as expires_at, the time it ended: a statement that
    # read the clock, then waited for the row while a release or break ended it, would see
    # that end after its now and take the entry for live (and revive it). pid NULL marks
    # it ended.
    @functools.cached_property
    def extend_many(self) -> str:
        return renewing(
            self.quoted, "p", " AND p.expires_at > now.t\n  AND p.pid IS NOT NULL",
            token=HOLDER_TOKEN,
        )

    @functools.cached_property
    def owned(self) -> str:
        return f"""
WITH {NOW}
SELECT 1 FROM {self.quoted} AS p, now
WHERE p.name = %(name)s AND p.{HOLDER_TOKEN} = %(token)s AND p.expires_at > now.t
  AND p.pid IS NOT NULL
"""

    # Inputs: name, channel. Ends every live permit, as a release does (places stay);
    # NOTIFYs waiters. Output: one row per permit that was live.
    @functools.cached_property
    def break_semaphore(self) -> str:
        return ending(
            f"{self.quoted} AS p", ENDED,
            f"p.name = %(name)s AND {_PERMIT} AND p.expires_at > now.t", _WAKE,
        )

    # Inputs: gc_after (seconds), limit. The clean-up: deletes the record and permit rows of
    # at most `limit` names whose every permit ended before IDLE_SINCE (a record without
    # permit rows, left by a tenure before rule 10, which deleted released permits, too).
    # Candidates come from the statement's snapshot; a record is then locked (other
    # sessions' locked records skipped) only if its fence is still the one read, and every
    # grant bumps it, so a name granted a permit since the snapshot is left alone. Holding
    # the record's lock, nothing can add a permit (grants go through it). Run in a
    # transaction with SWEEP_LOCK_TIMEOUT: an acquire locks expired permits before the
    # record, this the other way round. Output: one row (names deleted).
    @functools.cached_property
    def sweep(self) -> str:
        return f"""
WITH {NOW},
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
    # limit) followed by its live permits as arrays (host, pid, thread, acquired_at, seconds
    # left, fence, weight), oldest grant first, then its live places as arrays (host, pid,
    # thread, placed at, weight), in arrival order. One snapshot. Runs on a table without
    # the weight and arrival columns too (read through ``to_jsonb``).
    def _info(self, where: str) -> str:
        arrival = "(to_jsonb(p) ->> 'arrival')::bigint"
        arrays = ",\n       ".join(
            [f"array(SELECT {item} FROM {self.quoted} AS p WHERE {_LIVE_PERMITS} "
             "ORDER BY p.fence)" for item in _PERMIT_INFO]
            + [f"array(SELECT {item} FROM {self.quoted} AS p WHERE {_LIVE_PLACES} "
               f"ORDER BY {arrival})" for item in _PLACE_INFO]
        )
        return f"""
WITH {NOW}
SELECT rec.name, rec.fence, rec.permits,
       {arrays}
FROM {self.quoted} AS rec, now
WHERE rec.token = '' AND {where}
ORDER BY rec.name
"""

    @functools.cached_property
    def inspect(self) -> str:
        return self._info("rec.name = %(name)s")

    @functools.cached_property
    def list_semaphores(self) -> str:
        return self._info("starts_with(rec.name, %(prefix)s)")
