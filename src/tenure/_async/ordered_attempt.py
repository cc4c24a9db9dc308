"""The attempt of a store whose waiters queue as keys or nodes in arrival order (etcd,
ZooKeeper: the ordered-queue rule of ``tenure.backends._ordered_queue``).

A refused try leaves the attempt a place in the name's queue; every later try settles that
place (granted once nothing that counts is ahead of it), every wait watches what is ahead.
What the two stores share is written here once: when a wait has a place to wait in, what a
wait may have left behind, and how giving up leaves. Each store says how to wait in its
place, how to wait without one, and how to leave one.
"""

from __future__ import annotations

import abc
from typing import Generic, TypeVar

from tenure._async.store import AsyncAttempt
from tenure._types import Busy

__all__ = ["AsyncOrderedAttempt"]

PlaceT = TypeVar("PlaceT")


class AsyncOrderedAttempt(AsyncAttempt, Generic[PlaceT]):
    place: PlaceT | None = None
    """The waiter's place since the last refusal (None: never refused)."""
    waited: bool = False
    """A wait ran: it may have made a place, which giving up deletes."""

    async def wait(self, timeout: float, busy: Busy) -> None:
        self.waited = True
        timeout = self.before_place_lapses(timeout)
        if self.place is None:
            await self.wait_unplaced(timeout)
        else:
            await self.wait_in_place(self.place, timeout)

    @property
    def holds_place(self) -> bool:
        return self.spec.queues or self.waited

    async def leave(self) -> None:
        if self.spec.queues:
            await super().leave()  # a queued kind's place is a lease entry: its release
        elif self.place is not None:
            await self.leave_place(self.place)

    @abc.abstractmethod
    async def wait_unplaced(self, timeout: float) -> None:
        """A wait before any refusal (an election's observer): until the next deletion under
        the name (a release, expiry or break), or ``timeout``."""

    @abc.abstractmethod
    async def wait_in_place(self, place: PlaceT, timeout: float) -> None:
        """Until what is ahead of ``place`` goes, or ``timeout``."""

    @abc.abstractmethod
    async def leave_place(self, place: PlaceT) -> None:
        """Give the place up (a lock's or a permit's waiter that stops waiting)."""
