"""Leader election: a thin layer over the mutex lease. The leader is the holder of a live lock
lease on the election's name, its term is that lease's fence, and its value is the opaque
string the store keeps in the same lease record (the spec's ``value``), so
``leader()`` reads holder, term and value in one atomic step. Waiting, renewal, loss and the
undo of a failed or timed-out campaign are the shared lease logic of ``lease.py``. Written
for asyncio; ``scripts/unasync.py`` generates the threads flavour.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any, Self

from tenure._async.lease import AsyncLease, Hold
from tenure._errors import (
    InvalidArgument,
    InvalidArgumentType,
    LockLost,
    LockTimeout,
    NotOwned,
)
from tenure._lease_options import LeaseOptions
from tenure._types import Busy, Holder, Kind, Leader, LeaseSpec
from tenure._validation import validate_timeout

if TYPE_CHECKING:
    from tenure._async.client import AsyncLocks

__all__ = ["AsyncElection", "AsyncLeadership"]

MAX_VALUE_LENGTH = 4096
"""A value is a short address or label, not a payload: every backend stores it in the lease."""


def validate_value(value: object) -> str:
    if not isinstance(value, str):
        raise InvalidArgumentType(f"an election value must be a str, not {type(value).__name__}")
    if len(value) > MAX_VALUE_LENGTH:
        raise InvalidArgument(
            f"an election value holds at most {MAX_VALUE_LENGTH} characters, got {len(value)}"
        )
    return value


class AsyncLeadership(AsyncLease):
    """One campaign of an election: held means elected. ``term`` is the winning fence;
    ``lost`` is set once leadership is gone; ``check()`` raises LockLost after that."""

    noun = "leadership"

    def __init__(
        self,
        client: AsyncLocks,
        name: str,
        ttl: float,
        *,
        value: str,
        on_lost: Callable[[AsyncLeadership], Any] | None,
    ) -> None:
        # A leader renews while it leads; a campaign waits as long as its caller says.
        options = LeaseOptions(ttl=ttl, renew=True, on_lost=on_lost)
        super().__init__(client, LeaseSpec(value=value), name, options)
        self._term: int | None = None

    @property
    def term(self) -> int:
        """The fence this leadership was won with; kept after resign or loss, for logs and
        for the resource that checks fences. A won leadership (what ``campaign`` returns)
        always has one, so the type is ``int``; a ``candidate`` not yet elected raises
        NotOwned instead of answering None."""
        if self._term is None:
            raise NotOwned(self.name, "no term: this candidate has not been elected")
        return self._term

    def _begin(self, owner: object, token: str, fence: int, started: float) -> None:
        super()._begin(owner, token, fence, started)
        self._term = fence

    @property
    def value(self) -> str:
        """The value this leader last stored."""
        assert self.spec.value is not None
        return self.spec.value

    def _acquire_while_held(self, held: Hold) -> None:
        raise InvalidArgument(f"this campaign for {self.name!r} already won; resign first")

    async def proclaim(self, value: str) -> None:
        """Replace the leader's value in one atomic step, only while this leadership holds.
        Raises LockLost (and marks the leadership lost) if the lease is gone, NotOwned if
        this leadership was resigned (also while the proclaim was out)."""
        value = validate_value(value)
        self.check()
        owner = self._owner()
        hold = self._hold_for(owner, "proclaim")
        if not await self.store.set_value(self.name, hold.token, value):
            if self._released_meanwhile(owner, hold):
                raise NotOwned(self.name, "cannot proclaim: the leadership was resigned meanwhile")
            self.mark_lost(hold, "proclaim found the leadership gone")
            raise LockLost(self.name, "proclaim found the leadership gone")
        # Later acquires of this handle store the new value too.
        self.spec = dataclasses.replace(self.spec, value=value)

    async def resign(self) -> None:
        """Give up leadership: the lease (and its value) is removed and waiters are woken."""
        await self.release()

    async def __aenter__(self) -> Self:
        # ``campaign`` returns a leadership already won: entering it must not campaign
        # again. A ``candidate`` not yet elected campaigns here, as a lock's enter acquires.
        if self.fence is None:
            return await super().__aenter__()
        return self


class AsyncElection:
    """A handle on the election ``name``; creating it sends nothing (``AsyncLocks.election``)."""

    def __init__(self, client: AsyncLocks, name: str, ttl: float) -> None:
        self._client = client
        self.name = name
        self.ttl = ttl

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r} ttl={self.ttl}>"

    def candidate(
        self, value: str = "", *, on_lost: Callable[[AsyncLeadership], Any] | None = None
    ) -> AsyncLeadership:
        """A leadership handle that has not campaigned yet: its ``acquire(timeout=...)``
        campaigns once (True if elected), for callers that wait in slices (``tenure
        elect``). ``campaign`` is the usual way in."""
        return AsyncLeadership(
            self._client,
            self.name,
            self.ttl,
            value=validate_value(value),
            on_lost=on_lost,
        )

    async def campaign(
        self,
        value: str = "",
        timeout: float | None = None,
        *,
        on_lost: Callable[[AsyncLeadership], Any] | None = None,
    ) -> AsyncLeadership:
        """Wait until elected and return the won leadership, renewed until resigned or lost
        (``on_lost(leadership)`` runs once then). ``timeout`` None waits forever; when it
        passes, raises LockTimeout, and the campaign leaves nothing on the server (an
        acquire granted while the reply was lost is undone by the lease core)."""
        leadership = self.candidate(value, on_lost=on_lost)
        wait = validate_timeout(timeout)
        if not await leadership.acquire(timeout=wait):
            raise LockTimeout(self.name, wait)
        return leadership

    async def leader(self) -> Leader | None:
        """The current leader, its term and value read in one atomic step; None: no leader."""
        info = await self._client.store.inspect(Kind.LOCK, self.name)
        if info is None or info.holder is None:
            return None
        return Leader(info.value, info.fence, info.holder, info.acquired_at)

    async def observe(self, interval: float | None = None) -> AsyncIterator[Leader | None]:
        """Yield the current leader (None: no leader), then every change, in order.

        A change is a new term, a new value of the same term (proclaim), or the end of a
        term (None). The guarantee, given that an observer reads the server at moments:
        terms strictly increase; a term older than one already reported is never reported;
        two different terms are always separated by a None, reported even when the gap was
        shorter than a read (a mutex lease has a gap between any two terms); a term that
        began and ended between two reads is not reported by itself, only as part of that
        None gap. Reads happen every ``interval`` seconds (default ttl/10, at most 1 s) and
        at once when the backend announces a release.
        """
        pause = min(self.ttl / 10, 1.0) if interval is None else validate_timeout(interval)
        if pause is None or pause <= 0:
            raise InvalidArgument("observe's interval must be a positive number of seconds")
        # An attempt that never tries: its wait is the store's, woken by releases.
        watch = self._client.store.attempt(
            self.name, LeaseSpec(), "observer", self.ttl, Holder("", 0, "observer")
        )
        last: Leader | None = await self.leader()
        highest = 0 if last is None else last.term
        yield last
        while True:
            await watch.wait(pause, Busy(None))
            now = await self.leader()
            if now is not None and (
                now.term < highest or (last is None and now.term == highest)
            ):
                continue  # a stale read (a lagging replica): never report an older term
            if now == last:
                continue
            if now is not None and last is not None and now.term != last.term:
                yield None  # the gap between two terms, shorter than our reads
            if now is not None:
                highest = now.term
            last = now
            yield now
