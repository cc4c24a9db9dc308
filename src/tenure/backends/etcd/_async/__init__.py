"""etcd for asyncio; ``scripts/unasync.py`` generates ``_sync`` module by module."""

from tenure.backends.etcd._async.store import AsyncEtcdBackend

__all__ = ["BACKEND", "AsyncEtcdBackend"]

BACKEND = AsyncEtcdBackend
