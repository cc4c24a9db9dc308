"""Plain values passed between the lock logic, the backends and callers."""

from __future__ import annotations

import dataclasses
import datetime

__all__ = ["Busy", "Capabilities", "Grant", "Holder", "LockInfo", "Renewal"]


@dataclasses.dataclass(frozen=True, slots=True)
class Holder:
    """Who holds a lock, as stored beside it for ``tenure ls`` / ``tenure show``."""

    host: str
    pid: int
    thread: str
    """The thread name, or the asyncio task name, that acquired the lock."""


@dataclasses.dataclass(frozen=True, slots=True)
class LockInfo:
    """What a backend knows about one lock name, read in one atomic step."""

    name: str
    fence: int
    """The last fencing token issued for this name (0 if it was never acquired)."""
    holder: Holder | None
    """None when nobody holds a live lease."""
    acquired_at: datetime.datetime | None
    """When the current holder acquired it, by the server's clock (UTC)."""
    ttl_left: float | None
    """Seconds until the current lease runs out, by the server's clock."""

    @property
    def held(self) -> bool:
        return self.holder is not None


@dataclasses.dataclass(frozen=True, slots=True)
class Grant:
    """The backend granted the lease; ``fence`` was written in the same atomic step."""

    fence: int


@dataclasses.dataclass(frozen=True, slots=True)
class Busy:
    """Somebody else holds the lease for about ``ttl_left`` more seconds (None: unknown).

    ``waiting`` is the backend's own state of the attempt that got this answer (a queued
    waiter's place, an acquire pipelined behind its wait). The lock logic hands the Busy back
    to ``wait_for_release`` and to its next ``acquire``: the state travels with the attempt,
    explicitly, whichever thread or task the backend's calls happen to run in."""

    ttl_left: float | None
    waiting: object = dataclasses.field(default=None, compare=False, repr=False)


@dataclasses.dataclass(frozen=True, slots=True)
class Renewal:
    """One lease to extend in a batch: the renewal scheduler sends many at once."""

    name: str
    token: str
    ttl: float


@dataclasses.dataclass(frozen=True, slots=True)
class Capabilities:
    """What a backend guarantees; the docs print this table for every backend."""

    fencing: str
    """What a fence means here, e.g. "strictly increasing per name"."""
    fences_survive_restart: bool
    """Fences never repeat or go back after the server restarts."""
    leases_survive_restart: bool
    """A lease held when the server restarts is still held afterwards."""
    wakeups: str
    """How waiters learn of a release: "notification", "in-process", or "back-off"."""
    multi_host: bool
    """Processes on different hosts coordinate through it."""
    fault_tolerant: bool
    """The lock survives the loss of one server (replication, quorum)."""
