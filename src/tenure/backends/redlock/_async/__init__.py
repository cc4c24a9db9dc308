"""The Redlock backend for asyncio; ``scripts/unasync.py`` generates ``_sync`` from it, module
by module. ``nodes``: the connections and the fan-out to every node; ``store``: the verbs,
counted by the quorum rules (``_quorum``)."""

from tenure.backends.redlock._async.store import AsyncRedlockBackend

__all__ = ["BACKEND", "AsyncRedlockBackend"]

BACKEND = AsyncRedlockBackend
"""Redlock: one lock over several independent Redis masters, granted by a majority."""
