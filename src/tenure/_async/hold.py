"""What the lease logic knows about one live acquisition (``Hold``), and each kind's rule for
whether a new lease would wait (``would_wait``). Written for asyncio; ``scripts/unasync.py``
generates the threads flavour."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from tenure._types import Kind, LeaseSpec, LockInfo, Mode, Renewal

if TYPE_CHECKING:
    from tenure._async.lease import AsyncLease
    from tenure._async.renewer import AsyncRenewer

__all__ = ["Hold", "would_wait"]


def would_wait(spec: LeaseSpec, info: LockInfo | None) -> bool:
    """Whether a new lease of ``spec`` would be refused, given the name's record: a lock
    held; a semaphore without room for this permit's weight beside the live permits'
    units (or, queued, with a waiter that would stand ahead of it); a writer behind any
    holder or waiter, a reader behind a writer (held, or waiting ahead: a place that lasts
    is, but for a moment, behind a writer)."""
    if info is None:
        return False
    if spec.kind is Kind.SEMAPHORE:
        if spec.queues and info.queued:
            return True
        return bool(info.leases) and info.units + spec.weight > (info.limit or spec.limit)
    if spec.kind is Kind.RWLOCK:
        if info.queued:
            return True
        if spec.mode is Mode.WRITE:
            return info.held
        return any(lease.mode == Mode.WRITE for lease in info.leases)
    return info.held


@dataclasses.dataclass(eq=False)
class Hold:
    """One owner's live acquisition: the server-side token and what we know of its lease."""

    lease: AsyncLease
    token: str
    fence: int
    ttl: float
    lease_deadline: float
    """Client clock time by which the server's lease has surely run out, unless renewed. It is
    measured from *before* the request that set it, so it errs on the early side."""
    count: int = 1
    renewals: int = 0
    next_due: float = 0.0
    lost: bool = False
    reason: str = ""
    error: BaseException | None = None
    failed_renewals: int = 0
    """Renewals failed since the last that succeeded (``error`` holds the first's error)."""
    renewer: AsyncRenewer | None = None
    """The scheduler watching this hold, if any."""
    granted_at: float = 0.0
    """Client clock time of the grant, for the hold time reported on release."""
    home: object = None
    """Where the holder runs (its event loop, under asyncio): the renewal scheduler reports
    a loss there (``io.deliver``)."""

    @property
    def renewal(self) -> Renewal:
        return Renewal(self.lease.name, self.token, self.ttl, self.lease.spec.kind)

    @property
    def trusted_for(self) -> float:
        """Seconds a grant or renewal vouches for the lease: its ttl, or less on a backend
        whose leases also end with a session (``AsyncStore.lease_horizon``). It bounds
        ``lease_deadline`` and paces the renewals."""
        horizon = self.lease.store.lease_horizon
        return self.ttl if horizon is None else min(self.ttl, horizon)

    def doubt(self) -> str | None:
        """Why the backend, from what it knows locally, says the lease may be gone already
        (``AsyncStore.lease_doubt``); None when it has no such news."""
        return self.lease.store.lease_doubt(self.lease.spec.kind, self.lease.name, self.token)

    def ran_out(self) -> str:
        """The reason given when ``lease_deadline`` passes without a renewal."""
        if self.trusted_for < self.ttl:
            return (
                f"the lease can no longer be vouched for: {self.trusted_for} s (the backend's "
                f"session timeout, shorter than the ttl of {self.ttl} s) without a renewal"
            )
        return f"the lease ran out ({self.ttl} s without renewal)"

    def mark_lost(
        self, reason: str, error: BaseException | None = None, *, expected: bool = False
    ) -> None:
        self.lease.mark_lost(self, reason, error, expected=expected)
