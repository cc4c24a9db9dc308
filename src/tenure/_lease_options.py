"""A lease handle's settings, validated by the client (``AsyncLocks.lock``, ``semaphore``,
``election``) and handed to the handle in one piece, whatever the primitive."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

__all__ = ["LeaseOptions"]


@dataclasses.dataclass(frozen=True)
class LeaseOptions:
    """What a handle does with its leases; the meaning of each is ``AsyncLocks.lock``'s."""

    ttl: float
    timeout: float | None = None
    """How long ``acquire()`` and ``async with`` wait when not told (None: forever)."""
    blocking: bool = True
    """Whether ``async with`` waits (False: tries once, LockTimeout if busy)."""
    renew: bool = False
    max_renewals: int | None = None
    on_lost: Callable[[Any], Any] | None = None
    reentrant: bool = False
    hold_at_least: float = 0.0
    """Seconds from the grant during which a release leaves the name held on the server
    (a scheduled job's window: ``AsyncLease.release``); 0: a release frees it at once."""
