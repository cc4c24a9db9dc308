"""ZooKeeper for asyncio: locks and semaphores as ordered ephemeral nodes, one mechanism for
both (a lock is ``limit = 1``).

- **Acquire, first try**: create an ephemeral sequential node (``_nodes``) holding the
  record, and list the name's nodes, both sent at once (ZooKeeper answers a session's
  requests in order, so the list shows our node): granted if fewer than ``limit`` live
  nodes are ahead of ours, else ours is deleted. A node ahead is live unless its last
  write (``mtime``) plus its ttl is older than the server time of our own write (our
  node's ``mtime``): then it has expired, and we delete it, guarded by the version we
  judged (a renewal in between makes the delete fail, and it stays). So ``ttl`` means what
  it means on every backend, judged by the server's clock, and a hung-but-connected holder
  cannot keep a name forever (kazoo's own Lock recipe keeps it as long as the session
  lives).
- **Waiting**: the waiter creates its node at the back of the queue with a short ttl
  (``QUEUE_TTL``), rewritten at each wait so others see it alive, and watches the node just
  ahead (a lock) or the name's children (a semaphore). A waiter that dies or gives up is gone
  within ``QUEUE_TTL`` (or at once, when it gives up cleanly, or when its session ends).
  The watch wakes the waiter when the node ahead goes, not when it is rewritten (a renewal,
  another waiter's rewrite: the watch is set again), and each wait is bounded
  (``max_backoff``): then the waiter rewrites its node and ranks again, judging the nodes
  ahead by the server time of that rewrite (a lock's waiter reads the nearest first: if it
  is live, the others need not be read).
- **Granted from the queue**: once fewer than ``limit`` live nodes are ahead, the waiter
  rewrites its node with its real ttl (versioned: a node judged expired meanwhile is gone).
  A waiter woken by the delete of the one node ahead that could keep it waiting (a lock's
  only node ahead, a reader's only writer ahead) knows that nothing is ahead any more (nodes
  only join behind): it rewrites its node at once, without listing the queue. Any other
  waiter lists the queue once: with nothing ahead (nothing that counts) it is granted by
  its rewrite alone; else it rewrites its node and judges the nodes ahead from that list
  (read after the rewrite; the list may be older, but no node joins ahead).
- **Renewal**: a versioned ``set_data`` of the holder's node: a new ``mtime``. A renewal that
  finds its node gone (deleted as expired, broken, or its session ended) or finds that its
  previous write is older than its ttl by the server's time reports the lease lost.
- **Release**: one ``multi``: a write whose stat gives the server's time (the name's node
  with a fence not kept there yet, else the clock node) and the delete of our node, guarded
  by the version we last wrote; a release that finds its lease already expired by the
  server's clock (our last write plus its ttl before the multi's ``mtime``) answers False
  (LockLost), its node deleted all the same. A renewal of ours that lands first makes the
  delete fail (version): it is judged as its own answer would judge it, and the release
  goes again after it; a renewal that comes second finds the release begun and writes
  nothing. The write is not a rewrite of our own node: the waiter behind watches it, and
  would be woken by the rewrite rather than the delete.
- **The name's last fence** (its node's data, for ``inspect`` once no node holds it; it
  never goes back: every write of it is versioned after a read, or after our own write,
  showing a lower number): a first try's fence is written by its release's multi, or, if
  the lease is renewed first, in the background with the first renewal, or by a break of
  it; a fence granted from the queue is written in the background right after the grant
  (the release waits for it). A holder whose session ends before its release or renewal
  leaves the previous fence there (the node shows its own while it lives, and the next
  grant's is higher); the same was true before of a holder that ended between its grant
  and the fence's own write.
- **Sessions**: every grant remembers the session epoch it was made in (``session``'s
  docstring): once the connection was suspended or the session lost, the server may have
  ended the session and handed the name to a contender, so every earlier grant is doubted
  (``lease_doubt``, which ``check()`` consults and whose listener wakes the renewal
  scheduler), its renewal, ``owned`` and release answer False without asking, and its node,
  if the session survived, is deleted when the connection comes back. A grant is also
  vouched for no longer than two thirds of the session timeout after the request that
  confirmed it was sent (``lease_horizon``, ``SESSION_TRUST``), whatever its ttl: a holder
  paused past that (its session may have ended meanwhile, which kazoo only learns after it
  resumes), or whose renewals go unanswered without kazoo noticing (kazoo detects a dead
  connection by an unanswered heartbeat, and our own requests postpone its heartbeats),
  fails ``check()`` by its own clock and is told by the renewal scheduler, before the server
  can end the session.

- **Election values** (``AsyncStore.set_value``): the leader's value is a field of the
  holder node's record, written by the create or versioned set that grants the node,
  replaced by a versioned set of that node (only while it exists: a node deleted as
  expired, broken or with its session is gone for good), and gone with the node. A waiter's
  node is marked ``queued`` and carries no value until it is granted. ``inspect`` takes
  holder, value and term (the node's czxid) from one ``getData`` of the holder's node.

Fence: the holder node's ``czxid``. The name's node keeps the last fence granted.

**Requests** (``_calls.SENT`` counts them; ``tests/integration/test_zookeeper_requests.py``):

- Uncontended acquire + release. Before: 6 requests, 6 waits in a row (create, list, read
  and set the name's node; a versioned rewrite for the server time, a delete). Now: 3
  requests, 2 waits (create and list sent together; one multi). kazoo's Lock: 3 requests,
  3 waits (create, list, delete).
- Handoff, from the release to the next holder's grant. Before: the release's 2 (rewrite,
  delete), then the woken waiter's rewrite, list, rewrite with its ttl, read and set of the
  name's node: 7 requests, 7 waits in a row. Now: the release's multi, then the woken
  waiter's rewrite with its ttl: 2 waits in a row (and the fence in the background: a read
  and a set of the name's node; 4 requests). kazoo's Lock: a delete, then the woken
  waiter's list: 2 requests, 2 waits.

The first use of a name adds a read of its node (sent with the create). Each wait of a
queued waiter: before, a rewrite and a list on waking, a rewrite and a list again before
the watch, and a read of every node ahead; now a rewrite, a list, a read of the nearest
node ahead (a lock) and the watch, and nothing when the node ahead is merely rewritten.

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

**Read-write and fair locks** (kind ``rwlock``, ``tenure._async.ordered_queue`` for the rule
and the fence argument): the same nodes, with the mode in the node's name (``_nodes``).

- **Acquire, first try**: create the node with the holder's record, then rank: a writer is
  granted when no live node is ahead of it, a reader when no live write node is. Refused,
  the node stays as the waiter's place: rewritten at once, versioned, as a ``queued`` record
  with the place's ``queue_ttl``.
- **Waiting**: each wait rewrites the place, then watches the node just ahead (a writer) or
  the newest write node ahead (a reader, found from the children's names).
- **Granted from the queue**, **release**, **renewal**, **break** as for locks; a waiter
  that gives up deletes its node. ``inspect`` reports every live node not marked queued as
  a lease with its mode, and counts the live queued ones.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import threading
from collections.abc import Callable, Sequence
from typing import Any

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError
from kazoo.protocol.states import EventType

from tenure._async.capabilities import READ, WRITE
from tenure._async.ordered_queue import AsyncOrderedQueueStore
from tenure._concurrency import async_io as io
from tenure._errors import BackendError, limit_mismatch
from tenure._types import Busy, Capabilities, Grant, Holder, Kind, LeaseInfo, LockInfo, Renewal
from tenure.backends.zookeeper import SCHEMES
from tenure.backends.zookeeper._async.session import DECIDING, AsyncSession
from tenure.backends.zookeeper._config import ZooKeeperSettings, parse
from tenure.backends.zookeeper._nodes import (
    Record,
    decode_name,
    encode_name,
    is_entry,
    mode_of,
    node_prefix,
    sequence_of,
    token_of,
)

__all__ = ["QUEUE_TTL", "SESSION_TRUST", "AsyncZooKeeperBackend"]

QUEUE_TTL = 2.0
"""Seconds a waiter's node outlives its last rewrite, as judged by the others."""

SESSION_TRUST = 2 / 3
"""The fraction of the session timeout a grant or renewal vouches for a lease
(``lease_horizon``). The server ends a session it has not heard from for the session timeout,
counted from when it last heard from us, which is after the request that vouched for the
lease was sent; the client counts from before sending. The third left over absorbs timer
slack, a renewal scheduler woken late, and a server that negotiated a somewhat shorter
timeout than asked for (its ``minSessionTimeout``/``maxSessionTimeout``); it is kazoo's own
read timeout too. Renewals go at a third of it."""


@dataclasses.dataclass
class _Held:
    """What this process knows of one of its granted nodes."""

    path: str
    version: int
    mtime: int
    """Server milliseconds of our last write to it."""
    record: Record
    epoch: int
    """The session epoch it was granted in: once the session's epoch moved on, the
    connection was suspended or the session lost since, and the grant is doubted."""
    forsaken: bool = False
    """Its node was sent a delete: nobody believes in it any more."""
    released: bool = False
    """Its release has begun: a renewal or proclaim still out must not write it again."""
    fence_record: Any = None
    """The write of its fence to the name's node (``session.record_soon``), sent without
    waiting; the release waits for it, so that ``inspect`` after a release shows the
    fence."""
    unrecorded: tuple[str, int, int | None] | None = None
    """A first try's fence, not written to the name's node yet: the node, the fence and
    the node's version to write it at (None: read it first). The release writes it in its
    multi, or the first renewal in the background (module docstring, "Requests")."""
    written_ttl_ms: int = dataclasses.field(init=False, default=0)
    """The ttl our last write (the one at ``version``) gave the node. ``record`` may carry a
    newer ttl already, written by a renewal still out."""

    mutex: threading.Lock = dataclasses.field(
        init=False, default_factory=threading.Lock, repr=False, compare=False
    )
    """Keeps version, mtime and written_ttl_ms one write's: renewals write them from another
    thread than the holder's release reads them (the threads flavour's scheduler; under
    asyncio the renewal thread, which renews through this same backend: the leases live on
    its session)."""

    def __post_init__(self) -> None:
        self.written_ttl_ms = self.record.ttl_ms

    def lapsed_before(self, mtime: int) -> bool:
        """Whether the lease had run out, by the server's clock, before a write at ``mtime``
        (one of ours, which came after the one we last knew)."""
        with self.mutex:
            return self.mtime + self.written_ttl_ms < mtime

    def wrote(self, stat: Any, ttl_ms: int) -> None:
        """Record a write of ours that was not judged lapsed: its version, time and ttl."""
        with self.mutex:
            self.version, self.mtime, self.written_ttl_ms = stat.version, stat.mtime, ttl_ms

    def known(self) -> _Held:
        """A copy of what we know now (its own mutex), for a release to move on alone."""
        with self.mutex:
            known = copy.copy(self)
        known.mutex = threading.Lock()
        return known


@dataclasses.dataclass
class QueuePlace:
    """A waiter's state, carried by ``Busy.waiting`` between acquire and wait."""

    kind: str
    name: str
    token: str
    limit: int
    parent: str
    record: Record
    value: str | None = None
    """The election value the node gets when it is granted (None: a lock or a permit)."""
    path: str = ""
    """Our node once queued ("": not queued, or lapsed)."""
    version: int = 0
    czxid: int = 0
    mtime: int = 0
    """Server milliseconds of our last write to the node."""
    written_ttl_ms: int = 0
    """The ttl that last write gave the node: past ``mtime`` plus this, others may have
    judged it expired and gone ahead of it."""
    mode: str | None = None
    """A read-write lock's mode (None: a lock or a semaphore, ranked by ``limit``)."""
    ahead: list[str] | None = None
    """The nodes ahead of ours that our latest ranking left standing, oldest first; set by a
    refusal just made, which also rewrote our node, so the wait that follows watches the
    newest of them without listing the queue or rewriting the node again. None otherwise."""
    clear: str = ""
    """Our node's path once the one node ahead that could keep it waiting was deleted (its
    watch said so): nodes only join behind, so it is granted without listing the queue."""

    def wrote(self, stat: Any, ttl_ms: int) -> bool:
        """Record a write of the node; False if the write before it had already lapsed by the
        server's clock (module docstring: the node must then go)."""
        lapsed = self.mtime + self.written_ttl_ms < stat.mtime
        self.version, self.mtime, self.written_ttl_ms = stat.version, stat.mtime, ttl_ms
        return not lapsed


@dataclasses.dataclass
class _Ranked:
    live_ahead: list[Record]
    conflict: int | None
    writes_ahead: int = 0
    """How many of the live nodes ahead are a read-write lock's writers."""
    standing: list[str] = dataclasses.field(default_factory=list)
    """The nodes ahead not deleted by the ranking, oldest first."""

    def granted(self, limit: int, mode: str | None = None) -> bool:
        if mode == READ:
            return not self.writes_ahead
        if mode == WRITE:
            return not self.live_ahead
        return len(self.live_ahead) < limit


class AsyncZooKeeperBackend(AsyncOrderedQueueStore):
    """Options: ``namespace`` (the first node under the chroot, default ``tenure``),
    ``timeout`` (seconds for connecting and for each reply, default 5), ``session_timeout``
    (seconds, default 10). Credentials in the URL use digest authentication."""

    schemes = SCHEMES
    capabilities = Capabilities(
        fencing="strictly increasing per name: the holder node's creation zxid (czxid), "
        "across releases, restarts and leader changes; readers (or permits) granted "
        "together by one release may get theirs in any order among themselves, a "
        "write's is above every earlier one",
        fences_survive_restart=True,
        leases_survive_restart=True,
        wakeups="notification (a watch on the node ahead)",
        multi_host=True,
        fault_tolerant=True,
        fences_count_per_name=False,
    )
    notifies = True
    max_backoff = 0.5
    """The longest single wait: each wait rewrites the waiter's node first."""

    def __init__(self, settings: ZooKeeperSettings) -> None:
        self.settings = settings
        self.session = AsyncSession(settings)
        self.session.on_connected = self._forsake_doubted
        self._held: dict[tuple[str, str, str], _Held] = {}

    @classmethod
    def from_url(cls, url: str, **options: Any) -> AsyncZooKeeperBackend:
        return cls(parse(url, options))

    def describe(self) -> str:
        return self.settings.display

    def unanswered(self, seconds: float) -> BaseException:
        return self.session.unanswered(seconds)

    async def aclose(self) -> None:
        await self.session.aclose()

    # ---- the session's word on our leases (module docstring, "Sessions") ---------------

    @property
    def lease_horizon(self) -> float:
        return self.settings.session_timeout * SESSION_TRUST

    def lease_doubt(self, kind: str, name: str, token: str) -> str | None:
        held = self._held.get((kind, name, token))
        return None if held is None else self.session.interruption_since(held.epoch)

    def add_doubt_listener(self, listener: Callable[[], object]) -> None:
        self.session.add_doubt_listener(listener)

    def _doubted(self, held: _Held) -> bool:
        return held.epoch != self.session.epoch

    def _forsake(self, held: _Held) -> None:
        """Delete a doubted grant's node, without waiting: if the session survived the
        interruption the node still exists, and it must not keep the name from others."""
        if not held.forsaken:
            held.forsaken = True
            self.session.delete_soon(held.path)

    def _forsake_doubted(self) -> None:
        """The connection is back (kazoo's thread: nothing here blocks)."""
        for held in list(self._held.values()):
            if self._doubted(held):
                self._forsake(held)

    def _granted_in(self, epoch: int, path: str) -> None:
        """Raise if the session was interrupted while a grant was being made: it may
        already be void. The caller's undo removes the node."""
        if self.session.epoch != epoch:
            # The cause says what it is (a connection that went away), as a driver's would:
            # a caller deciding whether a retry can cure it reads it.
            raise BackendError(
                f"ZooKeeper {self.settings.display}: the connection was interrupted while "
                f"{path} was being granted"
            ) from ConnectionError("the ZooKeeper session's connection was interrupted")

    # ---- election values: a field of the holder's entry ------------------------------

    async def set_value(self, name: str, token: str, value: str) -> bool:
        held = self._held.get(("lock", name, token))
        if held is None:
            return False
        if self._doubted(held):
            self._forsake(held)
            return False
        # Recorded before the write: a renewal racing this set retries with the new record,
        # never putting the old value back. If the node is gone, the value no longer matters.
        held.record = dataclasses.replace(held.record, value=value)
        stat = await self._write_held(held)
        if stat is None:
            return False
        if held.lapsed_before(stat.mtime):
            # The lease had run out by the server's clock: it is not ours to relabel.
            await self._delete(held.path, stat.version)
            return False
        held.wrote(stat, held.record.ttl_ms)
        return True

    async def _write_held(self, held: _Held) -> Any:
        """A versioned set of our granted node to ``held.record``; its stat, or None once the
        node is gone. Only this process writes the node (others only delete it), so a version
        conflict is our own renewal or proclaim landing first: read the version, retry. Or
        our release's rewrite: then the node is not written again (its delete, guarded by the
        version the release wrote, would fail and leave it held)."""
        version = held.version
        while not held.released:
            try:
                return await self.session.call(
                    "set", held.path, held.record.encode(), version=version
                )
            except NoNodeError:
                return None
            except BadVersionError:
                stat = await self.session.call("exists", held.path)
                if stat is None:
                    return None
                version = stat.version
        return None

    async def _abandon(self, name: str, busy: Busy) -> None:
        place = busy.waiting
        if isinstance(place, QueuePlace) and place.path:
            path, place.path = place.path, ""
            await self._delete(path)

    # ---- the steps, once for both --------------------------------------------------------

    def _parent(self, kind: str, name: str) -> str:
        return f"/{self.settings.namespace}/{kind}/{encode_name(name)}"

    async def _acquire(
        self,
        kind: str,
        name: str,
        token: str,
        ttl: float,
        holder: Holder,
        *,
        limit: int,
        waited: Busy | None,
        value: str | None = None,
        mode: str | None = None,
        queue_ttl: float | None = None,
    ) -> Grant | Busy:
        place = waited.waiting if waited is not None else None
        if isinstance(place, QueuePlace) and place.token == token and place.path:
            return await self._settle(place, ttl, holder)
        parent = self._parent(kind, name)
        record = Record.new(holder, limit, ttl, value=value)
        epoch = self.session.epoch
        # One wait for two or three requests: the create, then the list of the queue, which
        # the server answers after the create, showing our node, and the name's node (for
        # the fence write) unless our last fence write of it says its version.
        created, children, *named = await self.session.call_together([
            ("create", (f"{parent}/{node_prefix(token, mode)}", record.encode()),
             {"ephemeral": True, "sequence": True, "makepath": True, "include_data": True}),
            ("get_children", (parent,), {}),
            *([] if self.session.recorded(parent) else [("get", (parent,), {})]),
        ])
        if isinstance(created, Exception):
            raise created
        path, stat = created
        if isinstance(children, Exception) or path.rpartition("/")[2] not in children:
            # The name's node was new: kazoo made it after the list was answered.
            children, named = await self.session.call("get_children", parent), []
        ranked = await self._rank(parent, path, stat.mtime, limit, mode, children=children)
        if ranked.conflict is None and ranked.granted(limit, mode):
            self._granted_in(epoch, path)
            self._held[(kind, name, token)] = _Held(
                path, stat.version, stat.mtime, record, epoch,
                unrecorded=self._unrecorded(parent, stat.czxid, *named),
            )
            return Grant(stat.czxid)
        if mode is not None:
            # A read-write lock's refused node stays, as this waiter's place in the queue.
            queued = Record.new(holder, limit, queue_ttl or QUEUE_TTL, queued=True)
            place = QueuePlace(
                kind, name, token, limit, parent, queued, path=path, czxid=stat.czxid,
                mtime=stat.mtime, written_ttl_ms=record.ttl_ms, version=stat.version, mode=mode,
            )
            if await self._rewrite(place) is not None:
                place.ahead = ranked.standing  # the wait that follows watches from this
            return Busy(None, place)
        await self._delete(path)
        if ranked.conflict is not None:
            raise limit_mismatch(name, ranked.conflict, limit)
        queued = Record.new(holder, limit, QUEUE_TTL, queued=True)
        return Busy(None, QueuePlace(kind, name, token, limit, parent, queued, value))

    async def _rank(
        self, parent: str, path: str, now_ms: int, limit: int, mode: str | None = None,
        *, children: list[str] | None = None,
    ) -> _Ranked:
        """The live nodes ahead of ``path`` (deleting those expired at ``now_ms``, the server
        time of our own latest write), and a limit they hold that differs from ours.
        ``children``: the name's nodes, listed after that write (None: list them now)."""
        ours = sequence_of(path)
        nodes = await self._children(parent) if children is None else _entries(children)
        ahead = [node for node in nodes if sequence_of(node) < ours]
        if len(ahead) > 1 and (mode == WRITE or (mode is None and limit == 1)):
            # One live node ahead refuses us: the nearest is read first, and the others
            # only if it expired (each waiter judges the one ahead of it, in turn).
            (nearest,) = await self.session.call_many("get", [(f"{parent}/{ahead[-1]}",)])
            if not isinstance(nearest, Exception):
                record = Record.decode(nearest[0])
                if nearest[1].mtime + record.ttl_ms >= now_ms:
                    conflict = None if mode is not None or record.limit == limit else (
                        record.limit
                    )
                    return _Ranked([record], conflict, standing=ahead)
        answers = await self.session.call_many("get", [(f"{parent}/{n}",) for n in ahead])
        live: list[Record] = []
        standing: list[str] = []
        writes = 0
        for node, answer in zip(ahead, answers, strict=True):
            if isinstance(answer, Exception):
                continue  # gone meanwhile
            data, stat = answer
            record = Record.decode(data)
            if stat.mtime + record.ttl_ms < now_ms:
                if not await self._delete(f"{parent}/{node}", stat.version):
                    # Rewritten since we judged it (its writer then finds its lapse and
                    # deletes it): passed, but it may still be there to watch.
                    standing.append(node)
                continue
            live.append(record)
            standing.append(node)
            writes += mode_of(node) == WRITE
        if mode is not None:
            return _Ranked(live, None, writes, standing)  # no limit to disagree on
        conflict = next((r.limit for r in live[:limit] if r.limit != limit), None)
        return _Ranked(live, conflict, standing=standing)

    async def _settle(self, place: QueuePlace, ttl: float, holder: Holder) -> Grant | Busy:
        """A queued waiter's acquire: granted once fewer than ``limit`` live nodes are
        ahead of its own."""
        place.ahead = None
        if place.clear and place.clear == place.path:
            # Woken by the delete of the one node ahead that counted: nothing can be ahead
            # any more (nodes only join behind), so no list, no judging, no server time.
            return await self._grant(place, ttl, holder)
        # The queue is listed first: with nothing ahead (nothing that counts, for a reader)
        # there is nothing to judge, and the waiter is granted at once. Else its node is
        # rewritten, for the server time to judge the nodes ahead by: read after it, so the
        # list may be older (nodes only join behind: it holds every node still ahead).
        children = await self._children(place.parent)
        ours = sequence_of(place.path)
        ahead = [n for n in children if sequence_of(n) < ours]
        if not [n for n in ahead if place.mode != READ or mode_of(n) == WRITE]:
            return await self._grant(place, ttl, holder)
        stat = await self._rewrite(place)
        if stat is None:
            return Busy(None, place)
        ranked = await self._rank(
            place.parent, place.path, stat.mtime, place.limit, place.mode, children=children
        )
        if ranked.conflict is not None:
            await self._abandon(place.name, Busy(None, place))
            raise limit_mismatch(place.name, ranked.conflict, place.limit)
        if not ranked.granted(place.limit, place.mode):
            place.ahead = ranked.standing  # the wait that follows watches from this
            return Busy(None, place)
        return await self._grant(place, ttl, holder)

    async def _grant(self, place: QueuePlace, ttl: float, holder: Holder) -> Grant | Busy:
        """Rewrite a waiter's node, found first in the queue, with the holder's record and
        ttl (versioned: a node judged expired meanwhile is gone, or its lapse is found)."""
        record = Record.new(holder, place.limit, ttl, value=place.value)
        epoch = self.session.epoch
        try:
            granted = await self.session.call(
                "set", place.path, record.encode(), version=place.version
            )
        except (NoNodeError, BadVersionError):
            place.path = ""  # judged expired meanwhile: join again at the back
            return Busy(None, place)
        if not place.wrote(granted, record.ttl_ms):
            await self._drop(place)  # lapsed before this grant: others went ahead of it
            return Busy(None, place)
        self._granted_in(epoch, place.path)
        self._held[(place.kind, place.name, place.token)] = _Held(
            place.path, granted.version, granted.mtime, record, epoch,
            # The name's node is read after the grant, in the background: a waiter's last
            # write of it is likely old (others held the name since).
            fence_record=self.session.record_soon(
                place.parent, place.czxid, None, guess=False
            ),
        )
        return Grant(place.czxid)

    async def _rewrite(self, place: QueuePlace) -> Any:
        """Rewrite the waiter's node so that the others see it alive; its stat, or None if
        it lapsed (then the next wait joins again)."""
        try:
            stat = await self.session.call(
                "set", place.path, place.record.encode(), version=place.version
            )
        except (NoNodeError, BadVersionError):
            place.path = ""
            return None
        if not place.wrote(stat, place.record.ttl_ms):
            await self._drop(place)
            return None
        return stat

    async def _drop(self, place: QueuePlace) -> None:
        """Delete a place that lapsed before our latest write revived it: a contender may
        have judged it expired and gone ahead (module docstring). The next wait joins
        again at the back."""
        path, place.path = place.path, ""
        await self._delete(path, place.version)

    async def _wait(self, kind: str, name: str, busy: Busy | None, timeout: float) -> None:
        place = busy.waiting if busy is not None else None
        if not isinstance(place, QueuePlace):
            # Not queued (an election's observer): wake when the name's nodes change (a
            # release, expiry judged by a contender, break or new contender), else after
            # ``timeout``.
            signal = io.Signal()
            with contextlib.suppress(NoNodeError):
                await self.session.call(
                    "get_children", self._parent(kind, name), watch=lambda _: signal.set()
                )
            await signal.wait(timeout)
            return
        # A refusal just made rewrote our node and listed the queue: its list is used as is.
        ahead, place.ahead = place.ahead, None
        if ahead is None and place.path:
            await self._rewrite(place)
        children = None
        if not place.path:
            created, children = await self.session.call_together([
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
            if isinstance(children, Exception) or path.rpartition("/")[2] not in children:
                children = None  # the name's node was new: list again below
        signal = io.Signal()
        if place.limit > 1:
            await self.session.call("get_children", place.parent, watch=lambda _: signal.set())
        else:
            ours = sequence_of(place.path)
            if ahead is None:
                nodes = await self._children(place.parent) if children is None else (
                    _entries(children)
                )
                ahead = [n for n in nodes if sequence_of(n) < ours]
            if place.mode == READ:
                ahead = [n for n in ahead if mode_of(n) == WRITE]  # the newest write ahead
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
                    self.session.watch_soon(watched, woken, gone, signal.set)
                else:
                    signal.set()

            if await self.session.call("exists", watched, watch=woken) is None:
                gone()
                return
            try:
                await signal.wait(timeout)
            finally:
                waiting = False
            return
        await signal.wait(timeout)

    async def release(self, kind: Kind, name: str, token: str) -> bool:
        held = self._held.pop((kind, name, token), None)
        if held is None:
            # An undo: remove any node this token may have written, and say nothing was held.
            parent = self._parent(kind, name)
            for node in await self._children(parent):
                if token_of(node) == token:
                    await self._delete(f"{parent}/{node}")
            return False
        held.released = True
        if self._doubted(held):
            self._forsake(held)
            return False
        try:
            return await self._release_held(held)
        finally:
            if held.fence_record is not None:
                await self.session.settled(held.fence_record)

    async def _release_held(self, held: _Held) -> bool:
        known = held.known()  # the write we know of; each conflict moves it on
        unrecorded, held.unrecorded = held.unrecorded, None
        if unrecorded is not None and unrecorded[2] is None:
            unrecorded = await self._fence_version(*unrecorded[:2])
        while True:
            # One multi: a write whose stat gives the server's time (for the ttl rule), and
            # the node's delete, guarded by the version we know. The write is the first
            # try's fence to the name's node if it is not there yet (versioned: it never
            # goes back), else one of the clock node. Not a rewrite of our node itself: its
            # waiter's watch would fire for the rewrite and miss the delete.
            if unrecorded is not None and unrecorded[2] is not None:
                parent, fence, version = unrecorded
                write = ("set_data", parent, str(fence).encode(), version)
            else:
                write = ("set_data", self._clock, b"", -1)
            stat, deleted = await self.session.commit([
                write, ("delete", held.path, known.version),
            ])
            if not isinstance(stat, Exception):
                if write[1] != self._clock and unrecorded is not None:
                    self.session.remember(unrecorded[0], unrecorded[1], stat.version)
                break
            if isinstance(stat, NoNodeError):
                if write[1] != self._clock:
                    unrecorded = None  # the name's node is gone: nothing to keep it on
                await self._make_clock()
                continue
            if isinstance(stat, BadVersionError) and unrecorded is not None:
                unrecorded = await self._fence_version(*unrecorded[:2])
                continue
            if not isinstance(deleted, BadVersionError):
                # Gone: deleted as expired, broken, or with the session. Its fence is kept
                # all the same: the name's last.
                if unrecorded is not None:
                    held.fence_record = self.session.record_soon(*unrecorded[:2], None)
                return False
            # Only this process writes the node (others only delete it): a renewal or
            # proclaim of ours landed first, its answer not read yet. Judge that write
            # as its own answer will, then write again after it.
            try:
                data, latest = await self.session.call("get", held.path)
            except NoNodeError:
                return False
            if known.lapsed_before(latest.mtime):
                await self._delete(held.path, latest.version)
                return False
            known.wrote(latest, Record.decode(data).ttl_ms)
        return not known.lapsed_before(stat.mtime)

    async def _fence_version(self, parent: str, fence: int) -> tuple[str, int, int | None] | None:
        """The name's node's version to write ``fence`` at, read now; None when it shows
        ``fence`` or a later one already."""
        try:
            data, stat = await self.session.call("get", parent)
        except NoNodeError:
            return None
        return None if int(data or b"0") >= fence else (parent, fence, stat.version)

    async def _extend_many(self, kind: str, renewals: Sequence[Renewal]) -> list[bool]:
        helds = [self._held.get((kind, r.name, r.token)) for r in renewals]
        for index, held in enumerate(helds):
            if held is not None and self._doubted(held):
                self._forsake(held)
                helds[index] = None  # refused without asking: see "Sessions" above
        writes = [
            (held.path, held.record.with_ttl(r.ttl).encode(), held.version)
            for r, held in zip(renewals, helds, strict=True) if held is not None
        ]
        answers = iter(await self.session.call_many("set", writes))
        results = []
        for renewal, held in zip(renewals, helds, strict=True):
            if held is None:
                results.append(False)
                continue
            stat = next(answers)
            if isinstance(stat, BadVersionError):
                # An election's proclaim landed first: write its record, with the new ttl.
                held.record = held.record.with_ttl(renewal.ttl)
                stat = await self._write_held(held)
            if stat is None or isinstance(stat, Exception):
                results.append(False)  # deleted as expired, broken, or the session ended
                continue
            if held.lapsed_before(stat.mtime):
                # The lease had run out by the server's clock before this renewal came.
                await self._delete(held.path, stat.version)
                results.append(False)
                continue
            held.record = held.record.with_ttl(renewal.ttl)
            held.wrote(stat, held.record.ttl_ms)
            self._record_unrecorded(held)
            results.append(True)
        return results

    async def owned(self, kind: Kind, name: str, token: str) -> bool:
        held = self._held.get((kind, name, token))
        if held is None or self._doubted(held):
            return False
        known = held.known()  # before the read: a renewal's answer may move it on
        now = await self._server_now()
        try:
            data, stat = await self.session.call("get", held.path)
        except NoNodeError:
            return False
        if stat.version != known.version and known.lapsed_before(stat.mtime):
            return False  # a renewal of ours came after the lease ran out: it reports it
        # A newer version is a renewal or proclaim of ours whose answer is not read yet (only
        # this process writes the node): its own record says the ttl it wrote.
        ttl_ms = known.written_ttl_ms if stat.version == known.version else (
            Record.decode(data).ttl_ms
        )
        return bool(stat.mtime + ttl_ms >= now)

    async def inspect(self, kind: Kind, name: str) -> LockInfo | None:
        parent = self._parent(kind, name)
        try:
            data, _ = await self.session.call("get", parent)
        except NoNodeError:
            return None
        fence = int(data or b"0")
        now = await self._server_now()
        nodes = await self._children(parent)
        answers = await self.session.call_many("get", [(f"{parent}/{n}",) for n in nodes])
        if kind == "rwlock":
            return self._info_in_turn(name, fence, now, nodes, answers)
        live = []
        values = []
        for answer in answers:
            if isinstance(answer, Exception):
                continue
            record = Record.decode(answer[0])
            stat = answer[1]
            left = (stat.mtime + record.ttl_ms - now) / 1000
            if record.queued:
                # A live waiter ahead of the rest: nothing behind it holds, and it holds
                # nothing itself until the set that grants it.
                if left > 0:
                    break
                continue
            if left > 0:
                live.append(LeaseInfo(record.holder, _utc(record.since), left, stat.czxid))
                values.append(record.value)
        if kind == "semaphore":
            limit = None
            if answers and not isinstance(answers[0], Exception):
                limit = Record.decode(answers[0][0]).limit
            holders = tuple(live[: limit or 0])
            return LockInfo(name, fence, None, None, None, kind="semaphore", limit=limit,
                            leases=holders)
        if not live:
            return LockInfo(name, fence, None, None, None)
        first = live[0]
        # Holder, term (the node's czxid) and value come from one getData of one node; the
        # name's fence is written just after a grant, so it may still show the previous term.
        return LockInfo(
            name, max(fence, first.fence or 0), first.holder, first.acquired_at, first.ttl_left,
            value=values[0],
        )

    def _info_in_turn(
        self, name: str, fence: int, now: int, nodes: list[str], answers: list[Any]
    ) -> LockInfo:
        """A read-write lock: every live node not marked queued holds the name (only a grant
        writes one), oldest first, with the mode its name says; the live queued ones wait."""
        leases = []
        queued = 0
        for node, answer in zip(nodes, answers, strict=True):
            if isinstance(answer, Exception):
                continue  # gone meanwhile
            data, stat = answer
            record = Record.decode(data)
            left = (stat.mtime + record.ttl_ms - now) / 1000
            if left <= 0:
                continue
            if record.queued:
                queued += 1
                continue
            leases.append(LeaseInfo(
                record.holder, _utc(record.since), left, stat.czxid, mode=mode_of(node)
            ))
        # The name's fence is written just after a grant: the newest lease may be ahead of it.
        fence = max([fence, *(lease.fence or 0 for lease in leases)])
        return LockInfo(name, fence, None, None, None, kind="rwlock", leases=tuple(leases),
                        queued=queued)

    async def list_records(self, kind: Kind, prefix: str) -> list[LockInfo]:
        try:
            nodes: list[str] = await self.session.call(
                "get_children", f"/{self.settings.namespace}/{kind}"
            )
        except NoNodeError:
            nodes = []
        names = [decode_name(node) for node in nodes]
        found = []
        for name in sorted(n for n in names if n.startswith(prefix)):
            info = await self.inspect(kind, name)
            if info is not None:
                found.append(info)
        return found

    async def break_leases(self, kind: Kind, name: str) -> bool:
        info = await self.inspect(kind, name)
        if info is None or not info.held:
            return False
        parent = self._parent(kind, name)
        fences = {lease.fence for lease in info.holders}
        # The holders' fences are kept on the name's node first: a first try's may not be
        # there yet (module docstring, "Requests"), and its node goes now.
        await self.session.settled(self.session.record_soon(parent, info.fence, None))
        nodes = await self._children(parent)
        answers = await self.session.call_many("exists", [(f"{parent}/{n}",) for n in nodes])
        broken = False
        for node, stat in zip(nodes, answers, strict=True):
            if not isinstance(stat, Exception) and stat is not None and stat.czxid in fences:
                broken = await self._delete(f"{parent}/{node}") or broken
        return broken

    # ---- nodes -------------------------------------------------------------------------

    async def _children(self, parent: str) -> list[str]:
        try:
            nodes: list[str] = await self.session.call("get_children", parent)
        except NoNodeError:
            return []
        return _entries(nodes)

    async def _delete(self, path: str, version: int = -1) -> bool:
        try:
            await self.session.call("delete", path, version=version)
        except DECIDING:
            return False
        return True

    def _unrecorded(
        self, parent: str, fence: int, named: Any = None
    ) -> tuple[str, int, int | None] | None:
        """A first try's fence to write to the name's node, and the node's version to write
        it at: from ``named``, the node's ``get`` answer read after our grant's node was
        made, else from our last write of it (else None: read it first). None when the
        node already shows the fence."""
        if isinstance(named, tuple):
            data, stat = named
            return None if int(data or b"0") >= fence else (parent, fence, stat.version)
        return parent, fence, self.session.recorded_version(parent, fence)

    def _record_unrecorded(self, held: _Held) -> None:
        """Write a first try's fence in the background (a renewal: the lease lives on)."""
        if held.unrecorded is not None and held.fence_record is None:
            parent, fence, version = held.unrecorded
            held.unrecorded = None
            held.fence_record = self.session.record_soon(parent, fence, version)

    @property
    def _clock(self) -> str:
        """A node written only for the ``mtime`` of the write: the server's time."""
        return f"/{self.settings.namespace}/clock"

    async def _make_clock(self) -> None:
        with contextlib.suppress(NodeExistsError):
            await self.session.call("create", self._clock, b"", makepath=True)

    async def _server_now(self) -> int:
        """The server's time in milliseconds: the ``mtime`` of a write of our own."""
        try:
            stat = await self.session.call("set", self._clock, b"")
        except NoNodeError:
            await self._make_clock()
            stat = await self.session.call("set", self._clock, b"")
        mtime: int = stat.mtime
        return mtime


def _entries(nodes: list[str]) -> list[str]:
    """The holders' and waiters' nodes among a name's children, oldest first."""
    return sorted((n for n in nodes if is_entry(n)), key=sequence_of)


def _utc(since: float) -> Any:
    import datetime

    return datetime.datetime.fromtimestamp(since, datetime.UTC)
