"""The counting semaphore: a name with up to ``limit`` units taken by live leases (permits,
each taking its ``weight``: 1 unless weighted), each with its own token, server-clock
expiry, holder and fence. A handle stands for ONE permit; the shared lease logic (waiting,
renewal, loss, fences) is ``lease.py``'s; its leases are the store's kind SEMAPHORE, with
the limit and weight in the spec, and, on a store that offers "weighted", a queue lease:
its refused waiters keep places served in arrival order (``LeaseSpec.queues``). Written
for asyncio; ``scripts/unasync.py`` generates the threads flavour.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tenure._async.lease import AsyncLease, Hold
from tenure._async.rwlock import QUEUE_TTL
from tenure._errors import InvalidArgument
from tenure._lease_options import LeaseOptions
from tenure._types import Kind, LeaseSpec

if TYPE_CHECKING:
    from tenure._async.client import AsyncLocks

__all__ = ["AsyncSemaphore"]


class AsyncSemaphore(AsyncLease):
    """A handle on ONE permit of the semaphore ``name``, taking ``weight`` of its ``limit``
    units (the live permits' weights never add up to more than ``limit``). Creating it sends
    nothing; see ``AsyncLocks.semaphore``. For several permits in
    one process, make several handles."""

    noun = "permit"

    def __init__(
        self, client: AsyncLocks, name: str, limit: int, options: LeaseOptions, *,
        weight: int = 1, queued: bool = False,
    ) -> None:
        # ``options.reentrant`` stays False: a permit is one lease per handle, not per task.
        # ``queued``: the store offers weighted FIFO permits, whose waiters keep places.
        spec = LeaseSpec(Kind.SEMAPHORE, limit=limit, weight=weight,
                         queue_ttl=QUEUE_TTL if queued else None)
        super().__init__(client, spec, name, options)
        self.limit = limit
        self.weight = weight

    def __repr__(self) -> str:
        weight = f" weight={self.weight}" if self.weight != 1 else ""
        return super().__repr__()[:-1] + f" limit={self.limit}{weight}>"

    def _acquire_while_held(self, held: Hold) -> None:
        raise InvalidArgument(
            f"this handle already holds a permit of {self.name!r}: one handle is one permit, "
            "make another handle for another permit"
        )
