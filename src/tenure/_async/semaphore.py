"""The counting semaphore: a name with up to ``limit`` live leases (permits), each with its
own token, server-clock expiry, holder and fence. A handle stands for ONE permit; the shared
lease logic (waiting, renewal, loss, fences) is ``lease.py``'s; its leases are the store's
kind SEMAPHORE, with the limit in the spec. Written for asyncio; ``scripts/unasync.py`` generates
the threads flavour.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tenure._async.lease import AsyncLease, Hold
from tenure._errors import InvalidArgument
from tenure._lease_options import LeaseOptions
from tenure._types import Kind, LeaseSpec

if TYPE_CHECKING:
    from tenure._async.client import AsyncLocks

__all__ = ["AsyncSemaphore"]


class AsyncSemaphore(AsyncLease):
    """A handle on ONE permit of the semaphore ``name`` (at most ``limit`` live permits per
    name). Creating it sends nothing; see ``AsyncLocks.semaphore``. For several permits in
    one process, make several handles."""

    noun = "permit"

    def __init__(self, client: AsyncLocks, name: str, limit: int, options: LeaseOptions) -> None:
        # ``options.reentrant`` stays False: a permit is one lease per handle, not per task.
        super().__init__(client, LeaseSpec(Kind.SEMAPHORE, limit=limit), name, options)
        self.limit = limit

    def __repr__(self) -> str:
        return super().__repr__()[:-1] + f" limit={self.limit}>"

    def _acquire_while_held(self, held: Hold) -> None:
        raise InvalidArgument(
            f"this handle already holds a permit of {self.name!r}: one handle is one permit, "
            "make another handle for another permit"
        )
