"""MongoDB for asyncio; ``scripts/unasync.py`` generates ``_sync`` module by module."""

from tenure.backends.mongodb._async.store import AsyncMongoDBStore

__all__ = ["BACKEND", "AsyncMongoDBStore"]

BACKEND = AsyncMongoDBStore
