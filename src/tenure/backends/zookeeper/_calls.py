"""kazoo's non-blocking calls by name, shared by both flavours (and kept out of the generated
modules: the generator would rename their ``_async`` suffix)."""

from __future__ import annotations

import collections
from collections.abc import Sequence
from typing import Any

__all__ = ["SENT", "commit", "new_result", "start"]

SENT: collections.Counter[str] = collections.Counter()
"""Requests sent to ZooKeeper by this process, by operation (a ``multi`` counts once): for
``bench/consensus_bench.py``, which prints the requests per cycle and per handoff. Counted
without a lock (kazoo's thread sends some of them): close enough for a benchmark, never
read by tenure itself."""


def start(client: Any, operation: str, *args: Any, **kwargs: Any) -> Any:
    """Send ``operation`` (``create``, ``get``, ``set``...) without waiting: kazoo's
    ``<operation>_async``, whose result kazoo's own thread completes."""
    SENT[operation] += 1
    return getattr(client, f"{operation}_async")(*args, **kwargs)


def commit(client: Any, operations: Sequence[tuple[Any, ...]]) -> Any:
    """Send ``operations`` (each ``(name, *args)``, a method of kazoo's transaction:
    ``set_data``, ``delete``, ``check``, ``create``) as one ``multi`` request, applied all or
    none, without waiting: its result is the list of each operation's answer, or of their
    errors when one failed."""
    SENT["multi"] += 1
    transaction = client.transaction()
    for name, *args in operations:
        getattr(transaction, name)(*args)
    return transaction.commit_async()


def new_result(client: Any) -> Any:
    """A new result of kazoo's, to be set by a chain of calls (``session.record_soon``)."""
    return client.handler.async_result()
