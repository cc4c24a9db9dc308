"""ZooKeeper for asyncio; ``scripts/unasync.py`` generates ``_sync`` module by module."""

from tenure.backends.zookeeper._async.store import AsyncZooKeeperBackend

__all__ = ["BACKEND", "AsyncZooKeeperBackend"]

BACKEND = AsyncZooKeeperBackend
