"""One acquire call's tries on ZooKeeper, and the waiter's place it keeps between them.

- **Waiting**: a refused lock or permit's node is deleted (``store.py``, "Acquire, first
  try"); its first wait creates a node at the back of the queue with a short ttl
  (``QUEUE_TTL``), the waiter's place, rewritten at each wait so others see it alive, and
  watches the node just ahead (a lock) or the name's children (a semaphore). A blocking
  lock's first try (``try_or_wait``) keeps its refused node as its place instead, when the
  place holds at the head (below): its wait rewrites it as queued and watches the node just
  ahead in one round trip, the ranking of its first try saying which. A read-write
  lock's refused node stays as its place (rewritten at once as ``queued``, with the place's
  ``queue_ttl``); each wait rewrites it, then watches the node just ahead (a writer) or the
  newest write node ahead (a reader, found from the children's names). A waiter that dies or
  gives up is gone within its queue ttl (or at once, when it gives up cleanly, or when its
  session ends). The watch wakes the waiter when the node ahead goes, not when it is
  rewritten (a renewal, another waiter's rewrite: the watch is set again), and each wait is
  bounded (``max_backoff``): then the waiter rewrites its node and lists the queue in one
  round trip, and ranks again, judging the nodes ahead by the server time of that rewrite (a
  lock's waiter reads the nearest first: if it is live, the others need not be read).
- **Granted from the queue**: once nothing that counts is ahead, the waiter rewrites its node
  with its real ttl (versioned: a node judged expired meanwhile is gone). A waiter woken by
  the delete of the one node ahead that could keep it waiting (a lock's only node ahead, a
  reader's only writer ahead) knows that nothing is ahead any more (nodes only join behind):
  it is granted without listing the queue. So is a lock's waiter whose watch, set by a read
  of the node just ahead (and set again by a read at each write of it), saw that node
  written as its holder's (``_nodes.written_as_holder``: only a grant writes that, and a
  grant had nothing ahead of it). Any other waiter woken by its watch lists the queue once:
  with nothing ahead (nothing that counts) it is granted; else it rewrites its node and
  judges the nodes ahead from that list (read before the rewrite; the list may be older, but
  no node joins ahead). The fence (the node's czxid) is written to the name's node in the
  background right after the grant (the release waits for it).
- **Granted at the head, written after**: a lock's place with no election value and a ttl
  at least ``QUEUE_TTL`` is written ``holds_at_head`` (``_nodes``): once it is the first
  node it holds the lock, as the others see it (they rank it as any node: live until its
  last write plus its place's ttl; ``inspect`` names it the holder). So its waiter, granted
  within ``GRANT_UNWRITTEN`` of ``QUEUE_TTL`` after its node's last write was sent (and in
  the session epoch of that write), takes the grant without waiting for a request: ONE
  multi, the versioned set that makes the node the holder's with its ttl and the write of
  its fence to the name's node, goes out unanswered, and the lease is counted from before it
  was sent, as after any grant. Until its answer is applied, the place's own lease stands:
  nobody can pass the node before its last write plus ``QUEUE_TTL`` by the server's clock,
  which is after the waiter sent that write, so ``check()`` doubts the lease
  (``lease_doubt``) once the multi is still unanswered ``SESSION_TRUST`` of ``QUEUE_TTL``
  after it; a multi that finds the node gone, or its place lapsed first (as any write of a
  place does, below), loses the lease, and the doubt listeners hear of it. Release,
  renewal, ``owned`` and an election value's set wait for that answer first (``grants``).
  The place's ttl is no longer than the holder's, so a holder that dies before its multi is
  answered leaves the lock no later than its ttl would. The fence's write is not versioned
  (the name's node's version is not known without a read), and still never puts a lower
  number over a higher one: a higher number is the fence of a node created after ours,
  behind it, granted only once it passed ours. Passing deletes our node, guarded by the
  version it judged, and then the multi (whose set is guarded by our node's version) fails
  whole; or that delete fails because a write of ours came between the judgement and it:
  an earlier rewrite, which finds its place lapsed (below), so no multi follows, or this
  multi itself, which the passing node's grant, and its fence write, then follow.

**A place that lapsed stays lapsed.** A contender judges a waiter's node expired when its last
write is older than its queue ttl by the server time of the contender's own write, and then
passes it (deleting it, guarded by the version it judged). A slow waiter may rewrite its node
between that judgement and the delete, which then fails: its node lives on, but the
contender has already gone ahead of it. So every write of a waiter's node (each wait's
rewrite, and the set that grants it) checks, as a renewal does, that the previous write was
not older than its ttl by the new write's ``mtime``; if it was, the waiter deletes the node
and joins again at the back. This is sound on the server's clock: the contender read the old
``mtime`` after its own write reached its server, so the waiter's next write comes later in
the log, and its ``mtime`` (the leader's clock at that write, which we take as not stepping
back) is at least the contender's time, past the old ``mtime`` plus the ttl.
"""

from __future__ import annotations

import contextlib
import time
from typing import TYPE_CHECKING, Any

from kazoo.exceptions import BadVersionError, NoNodeError
from kazoo.protocol.states import EventType

from tenure._async.ordered_attempt import AsyncOrderedAttempt
from tenure._concurrency import async_io as io
from tenure._errors import limit_mismatch
from tenure._types import Busy, Grant, Kind, Mode
from tenure.backends.zookeeper._async.grants import SESSION_TRUST
from tenure.backends.zookeeper._async.ranking import rank
from tenure.backends.zookeeper._async.session import AsyncSession, entries
from tenure.backends.zookeeper._leases import GRANT_UNWRITTEN, QUEUE_TTL, Held, Place
from tenure.backends.zookeeper._nodes import (
    Record,
    mode_of,
    node_prefix,
    sequence_of,
    written_as_holder,
)

if TYPE_CHECKING:
    from tenure.backends.zookeeper._async.store import AsyncZooKeeperBackend

__all__ = ["AsyncZooKeeperAttempt", "drop", "rewrite", "rewrite_op", "rewritten"]


class AsyncZooKeeperAttempt(AsyncOrderedAttempt[Place]):
    """The tries of one acquire call: the first creates a node (the store's ``join``); once
    refused, the attempt keeps the waiter's ``Place`` and every later try settles it."""

    store: AsyncZooKeeperBackend
    combines_try_and_wait = True
    known: bool = False
    """Every node this attempt made is known to it: its last try or wait ended normally (one
    cut short, by an error or a cancellation, may have made a node whose answer never
    came)."""

    async def try_once(self) -> Grant | Busy:
        self.known = False
        place = self.place
        outcome: Grant | Busy
        if place is not None and place.path:
            outcome = await self._settle(place)
        else:
            joined = await self.store.join(
                self.name, self.spec, self.token, self.ttl, self.holder
            )
            if isinstance(joined, Grant):
                outcome = joined
            else:
                self.place, outcome = joined, Busy(None)
        self.known = True
        return outcome

    async def try_or_wait(self, wait: float) -> Grant | Busy | None:
        """A blocking acquire's first try: a lock's refused node stays as its place (the
        store's ``join``, ``keep``), and the first wait follows at once, rewriting it as
        queued beside its watch. None for a second call, or when nothing is kept."""
        if self.place is not None:
            return None
        self.known = False
        joined = await self.store.join(
            self.name, self.spec, self.token, self.ttl, self.holder, keep=True
        )
        self.known = True
        if isinstance(joined, Grant):
            return joined
        self.place = joined
        await self.wait(wait, Busy(None))
        return Busy(None)

    async def wait(self, timeout: float, busy: Busy) -> None:
        self.known = False
        await super().wait(timeout, busy)
        self.known = True

    async def leave(self) -> None:
        place = self.place
        if self.spec.queues and self.known and place is not None:
            # Its place is the one node this attempt holds: deleted by its path, without
            # listing the queue for the token's nodes; none left (a permit's try refused at
            # once deletes its node in its refusal, as a lock's does): nothing to do.
            await self.leave_place(place)
            return
        await super().leave()

    async def leave_place(self, place: Place) -> None:
        if place.path:
            path, place.path = place.path, ""
            await self.store.session.delete(path)

    # ---- a place in the queue ----------------------------------------------------------------

    async def _settle(self, place: Place) -> Grant | Busy:
        """A queued waiter's try: granted once nothing that counts is ahead of its node."""
        place.ahead = None
        woken, place.woken = place.woken, False
        if place.clear and place.clear == place.path:
            # Woken by the delete of the one node ahead that counted: nothing can be ahead
            # any more (nodes only join behind), so no list, no judging, no server time.
            return await self._grant(place)
        session = self.store.session
        ours = sequence_of(place.path)
        if woken:
            # Woken by its watch: the queue is listed first. With nothing ahead (nothing
            # that counts, for a reader) there is nothing to judge, and the waiter is
            # granted at once. Else its node is rewritten, for the server time to judge the
            # nodes ahead by: read after it, so the list may be older (nodes only join
            # behind: it holds every node still ahead).
            children = await session.children(place.parent)
            if not counted(place, [n for n in children if sequence_of(n) < ours]):
                return await self._grant(place)
            stat = await rewrite(session, place)
            if stat is None:
                return Busy(None)
        else:
            # A wait that ran out: the node is due for its rewrite, and the list is read
            # after it in the same round trip.
            stat, children = await rewrite_and_list(session, place)
            if stat is None:
                return Busy(None)
            if not counted(place, [n for n in children if sequence_of(n) < ours]):
                return await self._grant(place)
        ranked = await rank(
            session, place.parent, place.path, stat.mtime, limit=place.limit, mode=place.mode,
            children=children,
        )
        if ranked.conflict is not None:
            await self.leave()  # a semaphore's place: deleted
            raise limit_mismatch(place.name, ranked.conflict, place.limit)
        if not ranked.granted(place.limit, place.mode, place.record.weight):
            place.ahead = ranked.standing  # the wait that follows watches from this
            return Busy(None)
        return await self._grant(place)

    async def _grant(self, place: Place) -> Grant | Busy:
        """Rewrite a waiter's node, found first in the queue, with the holder's record and
        ttl (versioned: a node judged expired meanwhile is gone, or its lapse is found)."""
        store, session = self.store, self.store.session
        record = Record.new(self.holder, place.limit, self.ttl, value=place.value,
                            fair=self.spec.fair, weight=place.record.weight)
        epoch = session.epoch
        if (
            place.record.holds_at_head and place.write_epoch == epoch
            and time.monotonic() < place.sent + QUEUE_TTL * GRANT_UNWRITTEN
        ):
            return await self._grant_at_head(place, record)
        try:
            granted = await session.call("set", place.path, record.encode(), version=place.version)
        except (NoNodeError, BadVersionError):
            place.path = ""  # judged expired meanwhile: join again at the back
            return Busy(None)
        if not place.wrote(granted, record.ttl_ms):
            await drop(session, place)  # lapsed before this grant: others went ahead of it
            return Busy(None)
        store._granted_in(epoch, place.path)
        store._held[(place.kind, place.name, place.token)] = Held(
            place.path, granted.version, granted.mtime, record, epoch, place.czxid,
            # The name's node is read after the grant, in the background: a waiter's last
            # write of it is likely old (others held the name since).
            fence_record=session.record_soon(place.parent, place.czxid, None, guess=False),
        )
        return Grant(place.czxid)

    async def _grant_at_head(self, place: Place, record: Record) -> Grant:
        """Granted at the head of the queue (module docstring, "Granted at the head, written
        after"): the set that makes the node the holder's is sent, not waited for."""
        store, session = self.store, self.store.session
        # The name's last fence goes in the same multi, unversioned: no grant with a higher
        # fence can have written it before this multi lands (module docstring).
        granting = await session.commit_soon([
            ("set_data", place.path, record.encode(), place.version),
            ("set_data", place.parent, str(place.czxid).encode(), -1),
        ])
        held = Held(
            place.path, place.version, place.mtime, record, place.write_epoch, place.czxid,
            granting=granting, parent=place.parent,
            grant_unanswered_after=place.sent + QUEUE_TTL * SESSION_TRUST,
        )
        held.written_ttl_ms = place.written_ttl_ms  # the place's, until the set is answered
        store._held[(place.kind, place.name, place.token)] = held
        granting.rawlink(lambda _: store._conclude_grant(held))
        return Grant(place.czxid)

    async def wait_in_place(self, place: Place, timeout: float) -> None:
        session = self.store.session
        place.woken = True  # unless the wait runs out (below)
        # A refusal just made rewrote our node and listed the queue: its list is used as is
        # (a first try's node kept as the place is rewritten beside the watch, below).
        ahead, place.ahead = place.ahead, None
        if ahead is None and place.path:
            await rewrite(self.store.session, place)
        children = None
        if not place.path:
            epoch, sent = session.epoch, time.monotonic()
            created, children = await session.call_together([
                ("create", (f"{place.parent}/{node_prefix(place.token, place.mode)}",
                            place.record.encode()),
                 {"ephemeral": True, "sequence": True, "makepath": True, "include_data": True}),
                ("get_children", (place.parent,), {}),
            ])
            if isinstance(created, Exception):
                raise created
            path, stat = created
            place.path, place.czxid, place.version = path, stat.czxid, stat.version
            place.mtime, place.written_ttl_ms = stat.mtime, place.record.ttl_ms
            place.sent, place.write_epoch = sent, epoch
            if isinstance(children, Exception) or path.rpartition("/")[2] not in children:
                children = None  # the name's node was new: list again below
        signal = io.Signal()
        if place.limit > 1:
            await session.call("get_children", place.parent, watch=lambda _: signal.set())
            place.woken = await signal.wait(timeout)
            return
        ours = sequence_of(place.path)
        if ahead is None:
            nodes = await session.children(place.parent) if children is None else (
                entries(children)
            )
            ahead = [n for n in nodes if sequence_of(n) < ours]
        if place.mode == Mode.READ:
            ahead = [n for n in ahead if mode_of(n) == Mode.WRITE]  # the newest write ahead
        if not ahead:
            if place.unmarked:
                await rewrite(session, place)
            return
        path, sole = place.path, len(ahead) == 1
        watched = f"{place.parent}/{ahead[-1]}"
        waiting = True
        granted_ahead = False

        def seen(answer: Any) -> None:
            # A lock's node ahead written as its holder's was granted with nothing ahead of
            # it, and nodes only join behind: once it goes, ours is first, as when it was
            # the only node ahead.
            nonlocal granted_ahead
            if place.kind == Kind.LOCK and written_as_holder(*answer):
                granted_ahead = True

        def gone() -> None:
            if sole or granted_ahead:
                place.clear = path
            signal.set()

        def woken(event: Any) -> None:
            if event.type == EventType.DELETED:
                gone()
            elif event.type == EventType.CHANGED and waiting:
                # A write of the node ahead (a renewal, a waiter's rewrite, its grant): it
                # still stands, so watch it again rather than wake. Waking would rewrite our
                # node, waking the waiter behind us, and so on down the queue.
                session.watch_soon(watched, woken, seen, gone, signal.set)
            else:
                signal.set()

        # The watch is set by a read of the node ahead, which says whether it was granted.
        watch = ("get", (watched,), {"watch": woken})
        if place.unmarked:
            # The first try's node, kept: rewritten as queued beside the watch, in one
            # round trip (a node gone meanwhile leaves the next try to join again).
            stat, found = await session.call_together([rewrite_call(session, place), watch])
            if not await rewritten(session, place, stat):
                return
        else:
            (found,) = await session.call_together([watch])
        if isinstance(found, NoNodeError):
            gone()
            return
        if isinstance(found, Exception):
            raise found
        seen(found)
        try:
            place.woken = await signal.wait(timeout)
        finally:
            waiting = False

    async def wait_unplaced(self, timeout: float) -> None:
        """Not queued (an election's observer): wake when the name's nodes change (a
        release, expiry judged by a contender, break or new contender), else after
        ``timeout``."""
        signal = io.Signal()
        with contextlib.suppress(NoNodeError):
            await self.store.session.call(
                "get_children", self.store._parent(self.spec.kind, self.name),
                watch=lambda _: signal.set(),
            )
        await signal.wait(timeout)


def counted(place: Place, ahead: list[str]) -> list[str]:
    """The nodes among ``ahead`` that can keep ``place`` waiting: every one, but a reader's
    writers only."""
    return [n for n in ahead if place.mode != Mode.READ or mode_of(n) == Mode.WRITE]


def rewrite_op(session: AsyncSession, place: Place) -> tuple[Any, ...]:
    """The versioned set that rewrites the waiter's node, as an operation of a ``multi``
    (``session.commit``); its answer goes to ``rewritten``."""
    place.sending(session.epoch)
    place.unmarked = False
    return "set_data", place.path, place.record.encode(), place.version


def rewrite_call(
    session: AsyncSession, place: Place
) -> tuple[str, tuple[Any, ...], dict[str, Any]]:
    """``rewrite_op`` as ``call_together`` takes it."""
    _, path, data, version = rewrite_op(session, place)
    return "set", (path, data), {"version": version}


async def rewritten(session: AsyncSession, place: Place, answer: Any) -> bool:
    """Apply the answer of a rewrite of the waiter's node (``rewrite_call``): whether the
    node still stands as the place. One deleted meanwhile (judged expired) is gone; one
    whose previous write had lapsed is deleted (``drop``). Then the next wait joins again."""
    if isinstance(answer, (NoNodeError, BadVersionError)):
        place.path = ""
        return False
    if isinstance(answer, Exception):
        raise answer
    if not place.wrote(answer, place.record.ttl_ms):
        await drop(session, place)
        return False
    return True


async def rewrite(session: AsyncSession, place: Place) -> Any:
    """Rewrite the waiter's node so that the others see it alive; its stat, or None if it
    lapsed (then the next wait joins again)."""
    (stat,) = await session.call_together([rewrite_call(session, place)])
    return stat if await rewritten(session, place, stat) else None


async def rewrite_and_list(session: AsyncSession, place: Place) -> tuple[Any, list[str]]:
    """``rewrite`` and the list of the name's nodes read after it, in one round trip: the
    stat (None if the place lapsed) and the nodes, oldest first."""
    stat, children = await session.call_together([
        rewrite_call(session, place), ("get_children", (place.parent,), {}),
    ])
    if not await rewritten(session, place, stat):
        return None, []
    if isinstance(children, Exception):
        raise children
    return stat, entries(children)


async def drop(session: AsyncSession, place: Place) -> None:
    """Delete a place that lapsed before our latest write revived it: a contender may have
    judged it expired and gone ahead (module docstring). The next wait joins again at the
    back."""
    path, place.path = place.path, ""
    await session.delete(path, place.version)
