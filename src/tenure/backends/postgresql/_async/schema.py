"""The tables, made on first use and upgraded in place: the lock table with the first
statement of a store, the permits table with the first semaphore acquire, the read-write
tables with the first read-write or fair acquire (a user of locks alone needs no privilege
on the others). Each is made or upgraded once, even with many processes racing, under the
lock table's creation lock; a table that is not ours, or from a newer tenure, is refused.
"""

from __future__ import annotations

from tenure._errors import ConfigurationError
from tenure._types import Kind
from tenure.backends._sql_common import SCHEMA_VERSION, parse_schema_mark, schema_mark
from tenure.backends.postgresql._async.connection import AsyncPool, Connection, fetch_row
from tenure.backends.postgresql._errors import UPGRADE_REFUSED
from tenure.backends.postgresql._rwlock_sql import RwlockStatements
from tenure.backends.postgresql._semaphore_sql import SemaphoreStatements
from tenure.backends.postgresql._sql import Statements

__all__ = ["AsyncSchema"]


class AsyncSchema:
    """Which of a store's tables are known to be ready (``forget``: none of the optional
    ones any more)."""

    def __init__(
        self, sql: Statements, semaphores: SemaphoreStatements, rwlocks: RwlockStatements
    ) -> None:
        self._sql = sql
        self._semaphores = semaphores
        self._rwlocks = rwlocks
        self._permits_ready = False
        self._rwlocks_ready = False

    def forget(self) -> None:
        self._permits_ready = False
        self._rwlocks_ready = False

    async def ready(self, pool: AsyncPool, kind: Kind, *, write: bool) -> bool:
        """Whether ``kind``'s tables exist (a permit is written only to a permits table with
        the slot rows' column: see ``permits``); nothing is created or altered."""
        if kind is Kind.SEMAPHORE:
            return await self.permits(pool, create=False, slots=write)
        return await self.rwlock_tables(pool, create=False)

    async def prepare(self, connection: Connection) -> None:
        """Create the lock table on first use, or add the election value's columns to one
        made before them, and check its schema version."""
        sql = self._sql
        params = {"table": sql.quoted}
        exists, comment, values = await fetch_row(connection, sql.schema, params)
        if exists and parse_schema_mark(comment) is not None:
            _check_schema(sql.table, comment)
        # A table without a mark is judged under the creation lock only: one that another
        # process is creating right now can show here already (``to_regclass`` reads the
        # latest catalog) while its comment does not yet (the statement's snapshot is
        # older). The lock waits for that creation; the reads after it see the table whole.
        if not exists or not values or parse_schema_mark(comment) is None:
            async with connection.transaction():
                await connection.execute(sql.create_lock, params)
                exists, comment, values = await fetch_row(connection, sql.schema, params)
                if not exists:
                    await connection.execute(sql.create)
                    await connection.execute(sql.comment)
                    comment = schema_mark()
                else:
                    _check_schema(sql.table, comment)  # never alter a table that is not ours
                    if not values:
                        await _upgrade(connection, sql.add_values, sql.table,
                                       "the columns elections need")
        _check_schema(sql.table, comment)

    async def permits(self, pool: AsyncPool, *, create: bool, slots: bool = True) -> bool:
        """Whether the permits table exists (and, with ``slots``, has the columns added
        since it was first made: slot rows' holder, weights, places' arrival; see
        ``_semaphore_sql``); with ``create``, make it, or add them to one made before them,
        first. Without ``create`` nothing is written: a permit or place of ours can only be
        in a table with the columns (our acquire added them), and reading or breaking
        permits needs none."""
        if self._permits_ready:
            return True
        sql = self._semaphores
        exists, upgraded = await self._ensure(
            pool, sql.exists, {"permits": sql.quoted}, (sql.create,),
            (sql.add_columns, sql.permits, "the columns its semaphores now need"),
            create=create,
        )
        self._permits_ready = exists and upgraded
        return exists and (upgraded or not slots)

    async def rwlock_tables(self, pool: AsyncPool, *, create: bool) -> bool:
        """Whether the read-write lock tables exist; with ``create``, make them first, or
        add the fair column to an entries table made before it. Without ``create`` nothing
        is written: reads take a missing fair column for NULL (``_rwlock_sql``)."""
        if self._rwlocks_ready:
            return True
        sql = self._rwlocks
        exists, upgraded = await self._ensure(
            pool, sql.exists, {"entries": sql.quoted_entries}, tuple(sql.create),
            (sql.add_fair, sql.entries, "the column fair locks now need"), create=create,
        )
        self._rwlocks_ready = exists and upgraded
        return exists

    async def _ensure(
        self, pool: AsyncPool, exists: str, params: dict[str, str],
        create_statements: tuple[str, ...], upgrade: tuple[str, str, str], *, create: bool,
    ) -> tuple[bool, bool]:
        """Whether an optional table exists and is upgraded (``exists``: the statement that
        says both); with ``create``, make it (``create_statements``) or upgrade it
        (``upgrade``: the statement, the table, why) first, under the lock table's creation
        lock, and judged again there: another process may have made or upgraded it since."""

        async def ensure(connection: Connection) -> tuple[bool, bool]:
            found, upgraded = await fetch_row(connection, exists, params)
            if (found and upgraded) or not create:
                return found, upgraded
            async with connection.transaction():
                await connection.execute(self._sql.create_lock, {"table": self._sql.quoted})
                found, upgraded = await fetch_row(connection, exists, params)
                if not found:
                    for statement in create_statements:
                        await connection.execute(statement)
                elif not upgraded:
                    await _upgrade(connection, *upgrade)
            return True, True

        result: tuple[bool, bool] = await pool.run(ensure)
        return result


async def _upgrade(connection: Connection, statement: str, table: str, what: str) -> None:
    """Alter a table an older tenure made, or say what its owner must run."""
    try:
        await connection.execute(statement)
    except UPGRADE_REFUSED as exc:
        raise ConfigurationError(
            f"table {table!r} was created by an older tenure and this user may not add "
            f"{what}; have the table's owner run: {statement.strip()}"
        ) from exc


def _check_schema(table: str, comment: str | None) -> None:
    version = parse_schema_mark(comment)
    if version is None:
        raise ConfigurationError(
            f"table {table!r} exists but is not a tenure lock table (its comment carries no "
            f"schema mark); choose another table name with the 'table' option"
        )
    if version > SCHEMA_VERSION:
        raise ConfigurationError(
            f"table {table!r} has tenure schema {version}, newer than this tenure's "
            f"{SCHEMA_VERSION}: upgrade tenure"
        )
