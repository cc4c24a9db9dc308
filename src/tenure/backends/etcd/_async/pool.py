"""The etcd leases this process grants, and the spares it keeps between acquisitions.

A holder's key is on a lease of its own, ``lease_seconds(ttl)`` long: the smallest whole
number of seconds (etcd's unit) above the ttl, so at most a second above (``lease_overrun``;
the client's own deadline uses the exact ttl, so ``check()`` errs early, never late). Above
and not equal, so that a lease can be granted ahead: a released holder's lease (its key
deleted, the lease alive) is kept as a spare for this process's next acquisition of the same
length, up to ``SPARE_LEASES`` per length, revoked on close and never used by a forked child.
The server ends a lease no sooner than ``seconds`` after the grant or keep-alive that last
restarted its clock (``Lease.refreshed``, stamped before it was sent), so a spare is written
on only while that leaves the whole ttl from now (a spare released less than a second ago,
for a whole-second ttl), else it is kept alive first (one request, as a grant would cost).
Why not one session lease for every hold, as etcd's lock service does: a holder that stops
renewing must lose the name after its ttl, which a lease kept alive for the others would not
do.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import time
from collections.abc import Callable, Sequence

from tenure.backends.etcd._async.gateway import AsyncGateway
from tenure.backends.etcd._errors import EtcdError, NotFound
from tenure.backends.etcd._slots import Slot
from tenure.backends.etcd._statements import JSON

__all__ = ["SPARE_LEASES", "AsyncLeasePool", "Lease", "lease_seconds", "whole_seconds"]

SPARE_LEASES = 4
"""Leases kept per length, alive and without a key, for this process's next acquisitions."""
CLOSE_TIMEOUT = 1.0
"""Seconds for revoking the spare leases on close: a spare holds no key, and lapses on its
own if the cluster cannot be reached."""


def whole_seconds(ttl: float) -> int:
    """etcd leases are whole seconds: round up, never down."""
    return max(1, math.ceil(ttl - 1e-9))


def lease_seconds(ttl: float) -> int:
    """A holder's lease: the smallest whole number of seconds above ``ttl``, so that a lease
    refreshed up to ``seconds - ttl`` ago still lasts the whole ttl (module docstring)."""
    return math.floor(ttl) + 1


@dataclasses.dataclass
class Lease:
    """An etcd lease this process granted."""

    id: str
    seconds: int
    refreshed: float
    """``time.monotonic()`` just before the grant or keep-alive that last restarted its clock
    was sent: the server ends it no sooner than ``refreshed + seconds``."""

    def lasts(self, ttl: float) -> bool:
        """Whether a key written on it now stays at least ``ttl`` seconds."""
        return self.refreshed + self.seconds - time.monotonic() >= ttl


class AsyncLeasePool:
    """Grants, keep-alives and revocations through one gateway, and the spare leases."""

    def __init__(self, gateway: AsyncGateway) -> None:
        self.gateway = gateway
        self._spare: dict[int, list[Lease]] = {}
        """Leases alive and without a key, by length, for the next acquisitions."""
        self._spare_pid = os.getpid()
        self._closed = False

    async def new(self, seconds: int) -> Lease:
        refreshed = time.monotonic()  # before the request: the server's clock starts later
        answer = await self.gateway.post("/v3/lease/grant", {"TTL": str(seconds)})
        return Lease(str(answer["ID"]), seconds, refreshed)

    async def lasting(self, seconds: int, ttl: float, kept: Lease | None = None) -> Lease:
        """A lease of ``seconds`` on which a key written now lasts at least ``ttl``: ``kept``
        (the one an attempt holds ready) or a spare, as it is if its clock restarted recently
        enough, else once kept alive; a new grant when none is left alive."""
        if kept is not None and kept.seconds != seconds:
            await self.keep_spare(kept)
            kept = None
        spares = self._spares_here().get(seconds, [])
        lease = kept if kept is not None else spares.pop() if spares else None
        if lease is None:
            return await self.new(seconds)
        if lease.lasts(ttl) or await self.refresh([lease]) == [True]:
            return lease
        return await self.new(seconds)  # ended meanwhile (a break, or expired)

    async def on_lease(
        self, txn: Callable[[Lease], JSON], lease: Lease, *, track: Slot | None = None
    ) -> tuple[JSON, Lease]:
        """Send the transaction ``txn(lease)`` writes; if etcd answers that the lease is not
        found (a spare ended meanwhile: a break, or a stall past its length), once more on a
        new lease. The answer, and the lease it used. ``track``: the slot of the key it
        writes (``AsyncGateway.post``)."""
        try:
            return await self.gateway.post("/v3/kv/txn", txn(lease), track=track), lease
        except NotFound:
            lease = await self.new(lease.seconds)
            return await self.gateway.post("/v3/kv/txn", txn(lease), track=track), lease

    def _spares_here(self) -> dict[int, list[Lease]]:
        if self._spare_pid != os.getpid():
            # A forked child: its parent's spares are its parent's to write on (rule 8).
            self._spare, self._spare_pid = {}, os.getpid()
        return self._spare

    async def keep_spare(self, lease: Lease) -> None:
        """Keep ``lease`` (alive, no key on it) for a next acquisition; revoke it when enough
        of its length are kept, or the pool is closed."""
        spares = self._spares_here().setdefault(lease.seconds, [])
        if len(spares) < SPARE_LEASES and not self._closed:
            spares.append(lease)
            return
        with contextlib.suppress(EtcdError):
            await self.revoke(lease.id)  # else it lapses on its own: it holds no key

    async def revoke(self, lease: str, *, timeout: float | None = None) -> bool:
        """Revoke ``lease`` (its keys go with it); False if it was already gone."""
        if not lease or lease == "0":
            return False
        try:
            await self.gateway.post("/v3/lease/revoke", {"ID": lease}, timeout=timeout)
        except NotFound:
            return False
        return True

    async def keep_alive(self, lease: Lease) -> bool:
        (alive,) = await self.refresh([lease])
        return alive

    async def refresh(self, leases: Sequence[Lease]) -> list[bool]:
        """Keep ``leases`` alive, in one request (the gateway reads a stream of
        keep-alives): which ones were, their clocks restarted."""
        sent = time.monotonic()
        body = "".join(f'{{"ID":"{lease.id}"}}' for lease in leases)
        answer = await self.gateway.post_stream("/v3/lease/keepalive", body)
        alive = {str(item["result"]["ID"]) for item in answer
                 if int(item.get("result", {}).get("TTL", 0)) > 0}
        for lease in leases:
            if lease.id in alive:
                lease.refreshed = sent
        return [lease.id in alive for lease in leases]

    async def time_to_live(self, lease: str) -> float:
        """Seconds left on ``lease``, whole (-1: expired, revoked, or none)."""
        if not lease or lease == "0":
            return -1.0
        answer = await self.gateway.post("/v3/lease/timetolive", {"ID": lease})
        return float(answer.get("TTL", 0))

    async def aclose(self) -> None:
        """Revoke the spares; the pool keeps none after this."""
        self._closed = True
        spares = [lease for leases in self._spares_here().values() for lease in leases]
        self._spare = {}
        for lease in spares:
            try:
                await self.revoke(lease.id, timeout=CLOSE_TIMEOUT)
            except EtcdError:
                break  # the cluster is out of reach: the others lapse on their own too
