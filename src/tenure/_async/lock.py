"""The lock handle: a name with at most one live lease (``LeaseSpec()``, kind LOCK), or, over
a queued spec, one side of a read-write lock or a fair lock. Everything else is the shared
lease logic of ``lease.py``. Written for asyncio; ``scripts/unasync.py`` generates the
threads flavour.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tenure._async.lease import DEFAULT, AsyncLease, Hold
from tenure._errors import InvalidArgument
from tenure._lease_options import LeaseOptions
from tenure._types import LeaseSpec

if TYPE_CHECKING:
    from tenure._async.client import AsyncLocks

__all__ = ["DEFAULT", "AsyncLock", "Hold"]


class AsyncLock(AsyncLease):
    """A handle on one named lock. Creating it sends nothing; see ``AsyncLocks.lock``.

    ``spec`` picks the lock's leases: the plain mutex by default; a fair lock, or a side of
    a read-write lock, is the same handle over a queued spec (``tenure._async.rwlock``),
    named ``noun`` in messages.
    """

    noun = "lock"

    def __init__(
        self,
        client: AsyncLocks,
        name: str,
        options: LeaseOptions,
        *,
        spec: LeaseSpec | None = None,
        noun: str | None = None,
    ) -> None:
        super().__init__(client, LeaseSpec() if spec is None else spec, name, options)
        if noun is not None:
            self.noun = noun

    def _acquire_while_held(self, held: Hold) -> None:
        if self.spec.shared:
            # A second shared lease would be granted at once and replace the first in this
            # handle's books, leaving the first to run out unseen.
            raise InvalidArgument(
                f"this handle already holds a {self.noun} of {self.name!r}: one handle is one "
                "lease; make another handle, or use reentrant=True to nest"
            )
