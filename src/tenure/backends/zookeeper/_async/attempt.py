"""One acquire call's tries on ZooKeeper, and the waiter's place it keeps between them.

- **Waiting**: a refused lock or permit's node is deleted (``store.py``, "Acquire, first
  try"); its first wait creates a node at the back of the queue with a short ttl
  (``QUEUE_TTL``), the waiter's place, rewritten at each wait so others see it alive, and
  watches the node just ahead (a lock) or the name's children (a semaphore). A read-write
  lock's refused node stays as its place (rewritten at once as ``queued``, with the place's
  ``queue_ttl``); each wait rewrites it, then watches the node just ahead (a writer) or the
  newest write node ahead (a reader, found from the children's names). A waiter that dies or
  gives up is gone within its queue ttl (or at once, when it gives up cleanly, or when its
  session ends). The watch wakes the waiter when the node ahead goes, not when it is
  rewritten (a renewal, another waiter's rewrite: the watch is set again), and each wait is
  bounded (``max_backoff``): then the waiter rewrites its node and ranks again, judging the
  nodes ahead by the server time of that rewrite (a lock's waiter reads the nearest first: if
  it is live, the others need not be read).
- **Granted from the queue**: a lock's waiter's node (``queued``, its queue ttl) also carries
  its value and the ttl it asked for (``asks_ms``). A waiter that knows no node is left ahead
  of its own (woken by the delete of the only node ahead in its last list: nodes only join
  behind; or a list showing none) takes the lock with its node as it is: no request at all,
  if less than ``TURN_BEFORE`` of its queue ttl passed by its own clock since its last write
  was sent and the session was not interrupted since (``_take``). Its lease counts from
  before that write was sent (``Grant.age``); every judge counts the node, once it is the
  oldest under the name, until its last write plus the ttl it asked for
  (``Record.counts_until``), so its first renewal, its release or a proclaim judge it so
  too. It then reads the name's node in the background: the version at which its release's
  multi keeps its fence there. Any other grant from the queue (a semaphore's, a read-write
  lock's, a lock's waiter late by its clock, or one whose nodes ahead expired without being
  deleted) rewrites the node with the holder's record and ttl (versioned: a node judged
  expired meanwhile is gone; its lapse is found as below), and its fence is written to the
  name's node in the background right after (the release waits for it). A waiter woken by
  the delete of the one node ahead that could keep it waiting (a lock's only node ahead, a
  reader's only writer ahead) does so without listing the queue; any other lists it once:
  with nothing ahead that counts it is granted at once; else it rewrites its node and
  judges the nodes ahead from that list (read after the rewrite; the list may be older, but
  no node joins ahead).

**Why a lock's waiter may take its turn without a write.** Let D be the moment the last node
ahead of the waiter's node W went (in the log's order; the leader stamps writes in that
order), M its last write's ``mtime``, q its queue ttl, s the moment that write was sent
(s <= M). W takes its turn only after it learned of D, and only if less than q passed since
s: so D < s + q <= M + q, by the server's clock, which we take as running at the rate of
ours. A judge C (its own write stamped T, its reads after it, oldest first in one pipeline)
passes W only when a node ahead of W still exists in its view and M + q < T: then D comes
after C's write, so D > T > M + q, and W cannot have taken its turn. When no node ahead of W
exists in its view, C counts W as granted until M plus the ttl it asked for, whether W took
its turn or not (a waiter late by its clock never does: it is granted by a write, or finds
its lapse and joins again); W's own count of its lease, from s, ends no later. The price of
not writing: a waiter paused (its session alive) at the moment its turn comes keeps the name
until its asked ttl from its last write has passed, as a paused holder does, where a
written grant would have let it go after its queue ttl; it is never granted that place.

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
import dataclasses
import time
from typing import TYPE_CHECKING, Any

from kazoo.exceptions import BadVersionError, NoNodeError
from kazoo.protocol.states import EventType

from tenure._async.ordered_attempt import AsyncOrderedAttempt
from tenure._concurrency import async_io as io
from tenure._errors import limit_mismatch
from tenure._types import Busy, Grant, Mode
from tenure.backends.zookeeper._async.ranking import rank
from tenure.backends.zookeeper._async.session import AsyncSession, entries
from tenure.backends.zookeeper._leases import Held, Place
from tenure.backends.zookeeper._nodes import Record, mode_of, node_prefix, sequence_of

if TYPE_CHECKING:
    from tenure.backends.zookeeper._async.store import AsyncZooKeeperBackend

__all__ = ["TURN_BEFORE", "AsyncZooKeeperAttempt", "drop", "rewrite"]

TURN_BEFORE = 0.9
"""A lock's waiter takes its turn with its node as it is only if less than this fraction of
its queue ttl passed, by its own clock, since its last write was sent (the rest: slack for
the two clocks' rates); later, it is granted by a write, which finds a lapse."""


class AsyncZooKeeperAttempt(AsyncOrderedAttempt[Place]):
    """The tries of one acquire call: the first creates a node (the store's ``join``); once
    refused, the attempt keeps the waiter's ``Place`` and every later try settles it."""

    store: AsyncZooKeeperBackend

    async def try_once(self) -> Grant | Busy:
        place = self.place
        if place is not None and place.path:
            return await self._settle(place)
        outcome = await self.store.join(self.name, self.spec, self.token, self.ttl, self.holder)
        if isinstance(outcome, Grant):
            return outcome
        self.place = outcome
        return Busy(None)

    async def leave_place(self, place: Place) -> None:
        if place.path:
            path, place.path = place.path, ""
            await self.store.session.delete(path)

    # ---- a place in the queue ----------------------------------------------------------------

    async def _settle(self, place: Place) -> Grant | Busy:
        """A queued waiter's try: granted once nothing that counts is ahead of its node."""
        place.ahead = None
        if place.clear and place.clear == place.path:
            # Woken by the delete of the one node ahead that counted: nothing can be ahead
            # any more (nodes only join behind), so no list, no judging, no server time; a
            # lock's waiter takes the lock with its node as it is (no request at all).
            return self._take(place) or await self._grant(place)
        # The queue is listed first: with nothing ahead (nothing that counts, for a reader)
        # there is nothing to judge, and the waiter is granted at once. Else its node is
        # rewritten, for the server time to judge the nodes ahead by: read after it, so the
        # list may be older (nodes only join behind: it holds every node still ahead).
        session = self.store.session
        children = await session.children(place.parent)
        ours = sequence_of(place.path)
        ahead = [n for n in children if sequence_of(n) < ours]
        if not ahead:
            return self._take(place) or await self._grant(place)
        if place.mode == Mode.READ and not [n for n in ahead if mode_of(n) == Mode.WRITE]:
            return await self._grant(place)
        stat = await rewrite(self.store.session, place)
        if stat is None:
            return Busy(None)
        ranked = await rank(
            session, place.parent, place.path, stat.mtime, limit=place.limit, mode=place.mode,
            children=children,
        )
        if ranked.conflict is not None:
            await self.leave()  # a semaphore's place: deleted
            raise limit_mismatch(place.name, ranked.conflict, place.limit)
        if not ranked.granted(place.limit, place.mode):
            place.ahead = ranked.standing  # the wait that follows watches from this
            return Busy(None)
        return await self._grant(place)

    def _take(self, place: Place) -> Grant | None:
        """A lock's waiter with no node left ahead of its own: granted with the node as it is
        (module docstring, "Granted from the queue"), if its queue lease, counted by our
        clock from before its last write was sent, has not run out and the session was not
        interrupted since. None: it must be granted by a write (``_grant``)."""
        asks_ms = place.record.asks_ms
        session = self.store.session
        age = time.monotonic() - place.sent
        if (
            asks_ms is None or session.epoch != place.epoch
            or age * 1000 >= place.written_ttl_ms * TURN_BEFORE
        ):
            return None
        # Its record from now on (renewals write it): the queued one's holder, value and
        # since (shown while it holds, as written, so inspect and an observer see one grant).
        record = dataclasses.replace(place.record, ttl_ms=asks_ms, queued=False, asks_ms=None)
        held = Held(
            place.path, place.version, place.mtime, record, place.epoch, place.czxid,
            unrecorded=(place.parent, place.czxid, None),
            # The release's multi keeps the fence on the name's node: it needs the node's
            # version, read now in the background (others wrote it since our last grant).
            name_read=session.read_soon(place.parent),
        )
        held.written_ttl_ms = asks_ms  # what others judge the node by, from its last write
        self.store._held[(place.kind, place.name, place.token)] = held
        # The lease counts from before our last write was sent: the server's count of it
        # (from that write's mtime) ends no earlier.
        return Grant(place.czxid, age=age)

    async def _grant(self, place: Place) -> Grant | Busy:
        """Rewrite a waiter's node, found first in the queue, with the holder's record and
        ttl (versioned: a node judged expired meanwhile is gone, or its lapse is found)."""
        store, session = self.store, self.store.session
        # Since as the node showed it (a lock's waiter's node may be shown holding already).
        record = dataclasses.replace(
            Record.new(self.holder, place.limit, self.ttl, value=place.value),
            since=place.record.since,
        )
        epoch, sent = session.epoch, time.monotonic()
        try:
            granted = await session.call("set", place.path, record.encode(), version=place.version)
        except (NoNodeError, BadVersionError):
            place.path = ""  # judged expired meanwhile: join again at the back
            return Busy(None)
        if not place.wrote(granted, record.ttl_ms, sent, epoch):
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

    async def wait_in_place(self, place: Place, timeout: float) -> None:
        session = self.store.session
        # A refusal just made rewrote our node and listed the queue: its list is used as is.
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
            place.sent, place.epoch = sent, epoch
            if isinstance(children, Exception) or path.rpartition("/")[2] not in children:
                children = None  # the name's node was new: list again below
        signal = io.Signal()
        if place.limit > 1:
            await session.call("get_children", place.parent, watch=lambda _: signal.set())
            await signal.wait(timeout)
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
            return
        path, sole = place.path, len(ahead) == 1
        watched = f"{place.parent}/{ahead[-1]}"
        waiting = True

        def gone() -> None:
            if sole:
                place.clear = path
            signal.set()

        def woken(event: Any) -> None:
            if event.type == EventType.DELETED:
                gone()
            elif event.type == EventType.CHANGED and waiting:
                # A write of the node ahead (a renewal, a waiter's rewrite): it still
                # stands, so watch it again rather than wake. Waking would rewrite our
                # node, waking the waiter behind us, and so on down the queue.
                session.watch_soon(watched, woken, gone, signal.set)
            else:
                signal.set()

        if await session.call("exists", watched, watch=woken) is None:
            gone()
            return
        try:
            await signal.wait(timeout)
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


async def rewrite(session: AsyncSession, place: Place) -> Any:
    """Rewrite the waiter's node so that the others see it alive; its stat, or None if it
    lapsed (then the next wait joins again)."""
    epoch, sent = session.epoch, time.monotonic()
    # Stamped anew: a lock's waiter's node is granted as it is, and shows this as its since.
    place.record = dataclasses.replace(place.record, since=time.time())
    try:
        stat = await session.call("set", place.path, place.record.encode(), version=place.version)
    except (NoNodeError, BadVersionError):
        place.path = ""
        return None
    if not place.wrote(stat, place.record.ttl_ms, sent, epoch):
        await drop(session, place)
        return None
    return stat


async def drop(session: AsyncSession, place: Place) -> None:
    """Delete a place that lapsed before our latest write revived it: a contender may have
    judged it expired and gone ahead (module docstring). The next wait joins again at the
    back."""
    path, place.path = place.path, ""
    await session.delete(path, place.version)
