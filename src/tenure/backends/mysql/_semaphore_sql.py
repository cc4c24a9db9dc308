"""The SQL of MySQL/MariaDB semaphores, with each statement's contract above it.

One table beside the lock table, ``{table}_permits``, keyed (name, token): each permit is a
row, and the semaphore's own record is the row whose token is empty (its fence counter, and
the limit stored with its live permits; no expiry).

A grant needs a count of the live permits that no concurrent grant can change meanwhile. So
an acquire is one short transaction: LOCK_NAME upserts the record row, which takes its row
lock (concurrent acquirers of the name queue there until we commit); then, under READ
COMMITTED, every later read sees all permits committed before the lock was ours. The
transaction is ACQUIRE, one text of several statements sent at once (the connections allow
multi-statement texts), so the whole decision costs one round trip, as a lock's acquire does;
the server runs the statements in order and stops at the first error, and the client then
rolls back. Each statement's outcome reaches the next through session variables
(``@tenure_*``, set afresh by every acquire before they are read). Every other step is one
statement in autocommit. Time is the server's ``UTC_TIMESTAMP(6)``, once per statement.
"""

from __future__ import annotations

import dataclasses

from tenure.backends.mysql._sql import NOW

__all__ = ["SemaphoreStatements"]

_THIS = "name = UNHEX(%(name)s) AND token <> ''"
_LIVE = f"{_THIS} AND expires_at > {NOW}"
# Over the live permits of a name joined to its record row (none: one row of NULLs).
_OTHERS = "COALESCE(SUM(p.token <> %(token)s), 0)"
_MINE = "MAX(IF(p.token = %(token)s, p.fence, NULL))"


@dataclasses.dataclass(frozen=True)
class SemaphoreStatements:
    table: str
    """The lock table's validated name; the permits table is named after it."""

    @property
    def quoted(self) -> str:
        return f"`{self.table[:56]}_permits`"

    @property
    def create(self) -> str:
        return f"""
CREATE TABLE IF NOT EXISTS {self.quoted} (
    name        VARBINARY(1024) NOT NULL,
    token       VARBINARY(255) NOT NULL,
    fence       BIGINT NOT NULL,
    permits     INT NULL,
    expires_at  DATETIME(6) NULL,
    acquired_at DATETIME(6) NULL,
    host        VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL,
    pid         BIGINT NULL,
    thread      VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL,
    PRIMARY KEY (name, token)
) ENGINE = InnoDB
"""

    # Inputs: name, token, ttl_us, limit, host, pid, thread. The whole acquire, one
    # transaction: takes the name's row lock (LOCK_NAME); drops expired permits; reads, in
    # one statement, the live others, the microseconds left of the soonest permit, our own
    # live permit's fence, the stored limit and the fence to grant (the record's next one if
    # we have no live permit, fewer than `limit` others are live and none is live under
    # another limit; else NULL); restarts our own live permit (a retry); or takes that fence
    # and adds our permit. Output: its one result set, one row (own fence, granted fence, live
    # others, soonest microseconds, stored limit); at most one of the fences is not NULL.
    @property
    def acquire(self) -> str:
        return f"""
START TRANSACTION;
{self.lock_name};
DELETE FROM {self.quoted} WHERE {_THIS} AND expires_at <= {NOW};
SELECT {_OTHERS}, TIMESTAMPDIFF(MICROSECOND, {NOW}, MIN(p.expires_at)), {_MINE},
       MAX(record.permits),
       IF({_MINE} IS NULL AND {_OTHERS} < %(limit)s
          AND ({_OTHERS} = 0 OR MAX(record.permits) = %(limit)s), MAX(record.fence) + 1, NULL)
FROM {self.quoted} AS record
LEFT JOIN {self.quoted} AS p ON p.name = record.name AND p.token <> '' AND p.expires_at > {NOW}
WHERE record.name = UNHEX(%(name)s) AND record.token = ''
INTO @tenure_others, @tenure_soonest, @tenure_mine, @tenure_stored, @tenure_granted;
UPDATE {self.quoted} SET expires_at = {NOW} + INTERVAL %(ttl_us)s MICROSECOND
WHERE name = UNHEX(%(name)s) AND token = %(token)s AND @tenure_mine IS NOT NULL;
UPDATE {self.quoted} SET fence = @tenure_granted, permits = %(limit)s
WHERE name = UNHEX(%(name)s) AND token = '' AND @tenure_granted IS NOT NULL;
INSERT INTO {self.quoted} (name, token, fence, expires_at, acquired_at, host, pid, thread)
SELECT UNHEX(%(name)s), %(token)s, @tenure_granted, {NOW} + INTERVAL %(ttl_us)s MICROSECOND,
       {NOW}, %(host)s, %(pid)s, %(thread)s
FROM DUAL WHERE @tenure_granted IS NOT NULL;
COMMIT;
SELECT @tenure_mine, @tenure_granted, @tenure_others, @tenure_soonest, @tenure_stored
"""

    # Inputs: name, limit. Creates the record row if absent and takes its row lock until
    # the transaction ends.
    @property
    def lock_name(self) -> str:
        return (
            f"INSERT INTO {self.quoted} (name, token, fence, permits) "
            f"VALUES (UNHEX(%(name)s), '', 0, %(limit)s) ON DUPLICATE KEY UPDATE fence = fence"
        )

    # Inputs: name, token. Affected rows: 1 = our live permit is gone.
    @property
    def release(self) -> str:
        return f"DELETE FROM {self.quoted} WHERE {_LIVE} AND token = %(token)s"

    # Inputs: name, token. Removes our permit whatever its state (after a refused release).
    @property
    def discard(self) -> str:
        return f"DELETE FROM {self.quoted} WHERE {_THIS} AND token = %(token)s"

    # Inputs: name, token, ttl_us. Affected rows (rows matched): 1 = extended.
    @property
    def extend(self) -> str:
        return (
            f"UPDATE {self.quoted} SET expires_at = {NOW} + INTERVAL %(ttl_us)s MICROSECOND "
            f"WHERE {_LIVE} AND token = %(token)s"
        )

    @property
    def owned(self) -> str:
        return f"SELECT 1 FROM {self.quoted} WHERE {_LIVE} AND token = %(token)s"

    # Input: name. Affected rows: the live permits freed (expired ones go too).
    @property
    def break_semaphore(self) -> str:
        return f"DELETE FROM {self.quoted} WHERE {_THIS}"

    @property
    def count_live(self) -> str:
        return f"SELECT COUNT(*) FROM {self.quoted} WHERE {_LIVE}"

    # One row per live permit (or one row of NULLs for a semaphore with none), each with its
    # semaphore's name, fence and limit; one consistent read.
    def _info(self, where: str) -> str:
        return f"""
SELECT r.name, r.fence, r.permits, p.host, p.pid, p.thread, p.acquired_at,
       TIMESTAMPDIFF(MICROSECOND, {NOW}, p.expires_at), p.fence
FROM {self.quoted} AS r
LEFT JOIN {self.quoted} AS p
  ON p.name = r.name AND p.token <> '' AND p.expires_at > {NOW}
WHERE r.token = '' AND {where}
ORDER BY r.name, p.fence
"""

    @property
    def inspect(self) -> str:
        return self._info("r.name = UNHEX(%(name)s)")

    @property
    def list_semaphores(self) -> str:
        return self._info(
            "r.name >= UNHEX(%(prefix)s) AND LEFT(r.name, %(length)s) = UNHEX(%(prefix)s)"
        )
