"""PostgreSQL for asyncio; ``scripts/unasync.py`` generates ``_sync`` module by module."""

from tenure.backends.postgresql._async.store import AsyncPostgreSQLStore

__all__ = ["BACKEND", "AsyncPostgreSQLStore"]

BACKEND = AsyncPostgreSQLStore
