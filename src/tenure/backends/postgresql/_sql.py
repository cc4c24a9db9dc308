"""The SQL behind ``postgresql://``, with each statement's contract above it.

Every lock operation is ONE statement run in autocommit: PostgreSQL makes a single statement
atomic, and ``INSERT ... ON CONFLICT DO UPDATE`` guarantees an insert or an update even when
many sessions race for a new name (no unique-violation, no lost race). Under READ COMMITTED
(set on every connection) a session that waited for another's row lock re-checks the
``WHERE`` of its ``DO UPDATE`` against the row as that one committed it, so two sessions can
never both see a lock free and both take it.

Time is the server's ``clock_timestamp()``, read once per statement in a ``now`` CTE (a CTE
with a volatile function is always evaluated once). ``now()`` would also do in autocommit,
where it is the statement's start, but it is frozen for a whole transaction: inside the
one-transaction batch of renewals, or a caller's own transaction, it would drift from the
truth. Both err on the safe side (an earlier time sees a lease as live a little longer and
ends a new lease a little sooner than the client believes), but ``clock_timestamp()`` does
not depend on how the statement is wrapped.

Names and tokens are bind parameters, never SQL text. The table name is spliced in, quoted,
after ``validate_table_name`` allowed only ``[A-Za-z_][A-Za-z0-9_]*``.

Fences (rule 10): a grant's fence is max(the stored fence + 1, the server's clock in
microseconds), ``FENCE_FLOOR``, computed in the granting statement. So fences strictly
increase per name while its row lives, and never go back when it is gone: a release clears
the holder, keeps ``fence`` and stamps ``expires_at`` with the release time (the lease's
end), and ``sweep`` deletes a row whose lease ended more than ``gc_after`` ago; the next
grant of the name then starts from the server's clock, above every fence it handed out
(provided the server's clock did not go back by more than that time). The same holds when the
table lost its rows (a restore from an old backup, a dropped table).

Election values: a leader's value lives in its lease row, in ``value``, with ``value_token``
the token that wrote it. A value counts only while that token holds the live lease, so a tenure
from before these columns (which neither sets nor clears them) can never make a stale value
look current: its acquire leaves ``value_token`` naming an earlier holder, its release
leaves ``token`` NULL. The columns are added to a table created before them, in place (plain
nullable columns, a change of the catalogue only; the schema version is unchanged, so older
tenure processes keep working on the same table).

Parameters are psycopg's ``%(name)s``: ``name`` text, ``token`` text, ``ttl`` float seconds,
``host``/``thread`` text, ``pid`` integer, ``channel`` the NOTIFY channel (= the table name).
"""

from __future__ import annotations

import dataclasses
import functools

from tenure.backends._sql_common import SCHEMA_VERSION, schema_mark

__all__ = [
    "ENDED",
    "FENCE_FLOOR",
    "IDLE_SINCE",
    "NOW",
    "SWEEP_LOCK_TIMEOUT",
    "VALUE_COLUMNS",
    "Statements",
    "ending",
    "renewing",
]

NOW = "now AS MATERIALIZED (SELECT clock_timestamp() AS t)"
"""The ``now`` CTE every statement opens with: the server's clock, read once."""
FENCE_FLOOR = "(extract(epoch FROM now.t) * 1000000)::bigint"
"""The server's clock in microseconds since the epoch, in a statement with the ``now`` CTE
(exact: ``extract`` returns numeric since PostgreSQL 14; ~1.8e15 fits a bigint)."""
IDLE_SINCE = "now.t - %(gc_after)s * interval '1 second'"
"""A record whose every lease or place ended before this is idle (``gc_after`` in seconds)."""
SWEEP_LOCK_TIMEOUT = "SELECT set_config('lock_timeout', %(ms)s, true)"
"""Run first in a clean-up's transaction: a clean-up waits this long at most for a row lock,
then gives up (and tries again next time) rather than be part of a deadlock another
session would have to be aborted for."""
VALUE_COLUMNS = ("value", "value_token")
"""The election value's columns, added by ``add_values`` to a table made before them."""
ENDED = "expires_at = now.t, host = NULL, pid = NULL, thread = NULL"
"""A semaphore's permit or a read-write lock's entry, ended: kept, not live, as the time its
name was last used; no holder (``pid`` NULL) tells it from a lease that lapsed. (A token
names its one lease, which is over: it stays.)"""
# A release ends the lease at the server's now: the row's expires_at is then the time its
# name was last used, which the clean-up (`sweep`) judges it by.
_FREE = (
    "token = NULL, expires_at = now.t, acquired_at = NULL, host = NULL, pid = NULL, "
    "thread = NULL, value = NULL, value_token = NULL"
)
_INFO = """
SELECT held.name, held.fence, held.token IS NOT NULL AND held.expires_at > now.t,
       held.host, held.pid, held.thread, held.acquired_at,
       extract(epoch FROM held.expires_at - now.t)::float8,
       CASE WHEN held.value_token = held.token AND held.expires_at > now.t
            THEN held.value END
FROM {table} AS held, now
"""


# Every kind's release and break, one template: ONE statement that ends the rows `where`
# picks (`free`: the assignments that end a lease; `locked`: a CTE locking them first, in key
# order, named in `using`) and queues a NOTIFY of `payload` on `channel` per row ended,
# delivered when it commits (PostgreSQL sends a repeated one once). Output: one row per row
# ended (`answer`'s columns first, read from `returning`).
def ending(
    target: str, free: str, where: str, payload: str, *,
    returning: str = "1", answer: str = "", locked: str = "", using: str = "now",
) -> str:
    return f"""
WITH {NOW},{locked}
ended AS (
    UPDATE {target} SET {free}
    FROM {using}
    WHERE {where}
    RETURNING {returning}
)
SELECT {answer}pg_notify(%(channel)s, {payload}) FROM ended
"""


# Every kind's batch of renewals, one template. Inputs: names, tokens (text arrays), ttls
# (float8 array), in step. Resets each lease `live` finds still held to now + its ttl, in
# one statement (`locked`: a CTE locking them first, named in `using`). Output: (name,
# token) of each one extended (`token`: the column naming a lease's token).
def renewing(
    target: str, alias: str, live: str, *,
    token: str = "token", locked: str = "", using: str = "now, wanted",
) -> str:
    return f"""
WITH {NOW},
wanted AS (
    SELECT * FROM unnest(%(names)s::text[], %(tokens)s::text[], %(ttls)s::float8[])
        AS wanted(name, token, ttl)
){locked}
UPDATE {target} AS {alias}
SET expires_at = now.t + wanted.ttl * interval '1 second'
FROM {using}
WHERE {alias}.name = wanted.name AND {alias}.{token} = wanted.token{live}
RETURNING {alias}.name, {alias}.{token}
"""


@dataclasses.dataclass(frozen=True)
class Statements:
    table: str
    """The validated table name, unquoted; also the LISTEN/NOTIFY channel."""

    @functools.cached_property
    def quoted(self) -> str:
        return f'"{self.table}"'

    # Inputs: table (the quoted name, as text). Output: one row (exists, comment, values),
    # where comment carries the schema version and values says whether the election value's
    # columns are there (all of VALUE_COLUMNS). Read-only.
    @functools.cached_property
    def schema(self) -> str:
        names = ", ".join(f"'{column}'" for column in VALUE_COLUMNS)
        return (
            "SELECT to_regclass(%(table)s) IS NOT NULL, "
            "obj_description(to_regclass(%(table)s), 'pg_class'), "
            "(SELECT count(*) FROM pg_attribute WHERE attrelid = to_regclass(%(table)s) "
            f"AND attname IN ({names}) AND NOT attisdropped) = {len(VALUE_COLUMNS)}"
        )

    # Run inside one short transaction with `schema` before and after: the advisory lock
    # serialises first-use creation by many processes (concurrent CREATE TABLE IF NOT EXISTS
    # can fail on pg_type's unique index), and the comment records the schema version.
    # The transaction-scoped lock is gone at commit; no session lock is ever left behind.
    @functools.cached_property
    def create_lock(self) -> str:
        return "SELECT pg_advisory_xact_lock(hashtext('tenure create ' || %(table)s))"

    @functools.cached_property
    def create(self) -> str:
        return f"""
CREATE TABLE IF NOT EXISTS {self.quoted} (
    name        text COLLATE "C" PRIMARY KEY,
    fence       bigint NOT NULL,
    token       text,
    expires_at  timestamptz,
    acquired_at timestamptz,
    host        text,
    pid         bigint,
    thread      text,
    value       text,
    value_token text
) WITH (fillfactor = 70)
"""

    # Run under `create_lock`, after `schema` found a tenure table without the value's
    # columns. IF NOT EXISTS: a process that raced us there (or one whose `schema` was
    # read before another's ALTER committed) changes nothing. Nullable, no default: only the
    # catalogue changes, no row is rewritten; the table's lock is held just that long.
    @functools.cached_property
    def add_values(self) -> str:
        return (
            f"ALTER TABLE {self.quoted} "
            + ", ".join(f"ADD COLUMN IF NOT EXISTS {column} text" for column in VALUE_COLUMNS)
        )

    @functools.cached_property
    def comment(self) -> str:
        # A utility statement takes no bind parameters; the text is our own constant.
        return f"COMMENT ON TABLE {self.quoted} IS '{schema_mark(SCHEMA_VERSION)}'"

    # Inputs: name, token, ttl, host, pid, thread, value (NULL for a plain lock). One
    # statement, one row out:
    #   (fence, NULL)     granted: the row was absent, free, expired, or already held with
    #                     this token (a retried acquire: fence, acquired_at and the value
    #                     this token stored kept, expiry reset); otherwise the fence became
    #                     max(fence + 1, FENCE_FLOOR) in this same statement (a new row's:
    #                     FENCE_FLOOR), and the value is `value`, tagged with `token`.
    #   (NULL, ttl_left)  held by another token: nothing changed; ttl_left is the holder's
    #                     remaining lease in seconds (NULL if the row only appeared during
    #                     this statement), read from the statement's snapshot.
    # In DO UPDATE, `held` is the existing row, `excluded` the proposed one.
    @functools.cached_property
    def acquire(self) -> str:
        return f"""
WITH {NOW},
taken AS (
    INSERT INTO {self.quoted} AS held
        (name, fence, token, expires_at, acquired_at, host, pid, thread, value, value_token)
    SELECT %(name)s, {FENCE_FLOOR}, %(token)s, now.t + %(ttl)s * interval '1 second', now.t,
           %(host)s, %(pid)s, %(thread)s, %(value)s::text, %(token)s
    FROM now
    ON CONFLICT (name) DO UPDATE SET
        fence = CASE WHEN held.token IS NOT DISTINCT FROM excluded.token
                     THEN held.fence ELSE greatest(held.fence + 1, excluded.fence) END,
        acquired_at = CASE WHEN held.token IS NOT DISTINCT FROM excluded.token
                           THEN held.acquired_at ELSE excluded.acquired_at END,
        value = CASE WHEN held.token IS NOT DISTINCT FROM excluded.token
                          AND held.value_token IS NOT DISTINCT FROM excluded.token
                     THEN held.value ELSE excluded.value END,
        value_token = excluded.token,
        token = excluded.token,
        expires_at = excluded.expires_at,
        host = excluded.host,
        pid = excluded.pid,
        thread = excluded.thread
    WHERE held.token IS NULL
       OR held.expires_at <= excluded.acquired_at
       OR held.token = excluded.token
    RETURNING held.fence
)
SELECT (SELECT fence FROM taken),
       (SELECT extract(epoch FROM held.expires_at - now.t)::float8
        FROM {self.quoted} AS held, now
        WHERE held.name = %(name)s AND held.token IS NOT NULL)
"""

    # Inputs: name, token, channel. Frees the lease if this token holds it and it has not
    # expired, and queues a NOTIFY on `channel` with the name as payload, delivered to the
    # listeners when the statement commits. Output: one row if released, none otherwise.
    @functools.cached_property
    def release(self) -> str:
        return ending(
            f"{self.quoted} AS held", _FREE,
            "held.name = %(name)s AND held.token = %(token)s AND held.expires_at > now.t",
            "name", returning="held.name",
        )

    # Inputs: name, token, value. Replaces the value if this token holds a live lease and
    # wrote the value stored with it. Output: one row if replaced, none otherwise.
    @functools.cached_property
    def set_value(self) -> str:
        return f"""
WITH {NOW}
UPDATE {self.quoted} AS held SET value = %(value)s
FROM now
WHERE held.name = %(name)s AND held.token = %(token)s AND held.value_token = %(token)s
  AND held.expires_at > now.t
RETURNING 1
"""

    # Inputs: name, token, ttl. Resets the expiry to now + ttl if this token holds a live
    # lease. Output: one row if extended, none otherwise.
    @functools.cached_property
    def extend(self) -> str:
        return f"""
WITH {NOW}
UPDATE {self.quoted} AS held SET expires_at = now.t + %(ttl)s * interval '1 second'
FROM now
WHERE held.name = %(name)s AND held.token = %(token)s AND held.expires_at > now.t
RETURNING 1
"""

    # See `renewing`: every lease still held by its token.
    @functools.cached_property
    def extend_many(self) -> str:
        return renewing(self.quoted, "held", " AND held.expires_at > now.t")

    # Inputs: name, token. Output: a row if this token holds a live lease. Read-only.
    @functools.cached_property
    def owned(self) -> str:
        return f"""
WITH {NOW}
SELECT 1 FROM {self.quoted} AS held, now
WHERE held.name = %(name)s AND held.token = %(token)s AND held.expires_at > now.t
"""

    # Inputs: name, channel. Frees a live lease whoever holds it (the operator's break),
    # keeps the fence, notifies waiters. Output: one row if a live lease was freed.
    @functools.cached_property
    def break_lock(self) -> str:
        return ending(
            f"{self.quoted} AS held", _FREE,
            "held.name = %(name)s AND held.token IS NOT NULL AND held.expires_at > now.t",
            "name", returning="held.name",
        )

    # Inputs: gc_after (seconds), limit. The clean-up: deletes at most `limit` rows whose
    # lease ended (expiry or release time) before IDLE_SINCE, or that a tenure before
    # rule 10 released (no end recorded), skipping rows another session has locked. The
    # idle condition is judged on each row's latest version once it is locked (FOR UPDATE
    # re-checks it under READ COMMITTED), so a lease granted meanwhile is never deleted; an
    # acquire waiting for a deleted row inserts it anew. Output: one row (rows deleted).
    @functools.cached_property
    def sweep(self) -> str:
        idle = (
            f"held.expires_at < {IDLE_SINCE} "
            "OR (held.token IS NULL AND held.expires_at IS NULL)"
        )
        return f"""
WITH {NOW},
idle AS (
    SELECT held.name FROM {self.quoted} AS held, now
    WHERE {idle}
    LIMIT %(limit)s
    FOR UPDATE OF held SKIP LOCKED
),
gone AS (
    DELETE FROM {self.quoted} AS held USING idle, now
    WHERE held.name = idle.name AND ({idle})
    RETURNING 1
)
SELECT count(*) FROM gone
"""

    # Input: name. Output: at most one row (name, fence, live, host, pid, thread,
    # acquired_at, ttl_left, value), value only while its writer holds the live lease.
    # Read-only, one snapshot.
    @functools.cached_property
    def inspect(self) -> str:
        return f"WITH {NOW} " + _INFO.format(table=self.quoted) + " WHERE held.name = %(name)s"

    # Input: prefix. Output: the rows of `inspect` for every name starting with prefix, in
    # byte order (the column's collation is "C"). starts_with() compares text: a LIKE
    # pattern would read % and _ in the prefix as wildcards. MVCC: blocks no writer.
    @functools.cached_property
    def list_locks(self) -> str:
        return (
            f"WITH {NOW} " + _INFO.format(table=self.quoted)
            + " WHERE starts_with(held.name, %(prefix)s) ORDER BY held.name"
        )

    # The waiters' dedicated connection subscribes with this (channel names are identifiers:
    # quoted, like the table).
    @functools.cached_property
    def listen(self) -> str:
        return f"LISTEN {self.quoted}"
