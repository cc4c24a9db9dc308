"""One scenario every primitive's module runs: a renewal out while the holder releases."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable

import tenure
from tests.conformance import async_helpers as helpers

Lease = tenure.AsyncLock | tenure.AsyncSemaphore


async def extend_racing_release(
    url: str,
    lease_of: Callable[[tenure.AsyncLocks], Lease],
    excluding: Callable[[tenure.AsyncLocks], Lease] | None = None,
) -> None:
    """A renewal (the watchdog's, or the holder's own ``extend``) may be out at the moment
    the holder releases. Whichever lands first, the release is not a loss (CI once saw
    LockLost from a ZooKeeper release whose versioned write met a renewal's, landed just
    before it), an extend that lands second reports the release (NotOwned), not a loss, and
    nothing is left held: ``excluding`` (default: ``lease_of``) then acquires at once. Five
    rounds, each with a new lease of ``lease_of``."""

    async def extend_unless_released(lease: Lease) -> None:
        with contextlib.suppress(tenure.NotOwned):
            await lease.extend()

    async with tenure.connect_async(url) as locks:
        for _ in range(5):
            lease = lease_of(locks)
            assert await lease.acquire()
            await helpers.gather(functools.partial(extend_unless_released, lease), lease.release)
            assert not lease.lost.is_set()
            after = (excluding or lease_of)(locks)
            assert await after.acquire(blocking=False), "a lease was left held"
            await after.release()
