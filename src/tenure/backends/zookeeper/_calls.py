"""kazoo's non-blocking calls by name, shared by both flavours (and kept out of the generated
modules: the generator would rename their ``_async`` suffix)."""

from __future__ import annotations

from typing import Any

__all__ = ["start"]


def start(client: Any, operation: str, *args: Any, **kwargs: Any) -> Any:
    """Send ``operation`` (``create``, ``get``, ``set``...) without waiting: kazoo's
    ``<operation>_async``, whose result kazoo's own thread completes."""
    return getattr(client, f"{operation}_async")(*args, **kwargs)
