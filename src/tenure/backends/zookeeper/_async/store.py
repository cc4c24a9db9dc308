"""ZooKeeper for asyncio, the store: locks, semaphores, elections and read-write (and fair)
locks as ordered ephemeral nodes, one mechanism for all (a lock is ``limit = 1``). Its rooms:
``session`` (the connection: the only module that calls kazoo), ``grants`` (the verbs about one
granted node: release, renewal, ownership, election values, the session's doubt),
``attempt`` (one acquire call's tries, waits and waiting place), ``ranking`` (which nodes
ahead count), ``sweep`` (the clean-up of idle names' nodes, after releases), ``_records``
(nodes to ``LockInfo``), ``_nodes`` (the layout), ``_leases`` (what is kept between calls),
``_errors`` (kazoo's failures).

- **Acquire, first try**: create an ephemeral sequential node (``_nodes``) holding the
  record, and list the name's nodes, both sent at once (ZooKeeper answers a session's
  requests in order, so the list shows our node): granted if fewer than ``limit`` live
  nodes are ahead of ours, else ours is deleted (in one multi with a check of the nodes
  that refused it: ``refusal``). A node ahead is live unless its last
  write (``mtime``) plus its ttl is older than the server time of our own write (our
  node's ``mtime``): then it has expired, and we delete it, guarded by the version we
  judged (a renewal in between makes the delete fail, and it stays). So ``ttl`` means what
  it means on every backend, judged by the server's clock, and a hung-but-connected holder
  cannot keep a name forever (kazoo's own Lock recipe keeps it as long as the session
  lives).
- **Waiting**, **granted from the queue**: ``attempt``'s docstring.
- **Renewal**, **release**, **the name's last fence**, **sessions**, **election values**:
  ``grants``' docstring.

Fence: the holder node's ``czxid``. The name's node keeps the last fence granted, until it
has been idle for ``gc_after`` (``sweep``).

**Requests** (``_calls.SENT`` counts them; ``tests/integration/test_zookeeper_requests.py``):

- Uncontended acquire + release. Before: 6 requests, 6 waits in a row (create, list, read
  and set the name's node; a versioned rewrite for the server time, a delete). Now: 3
  requests, 2 waits (create and list sent together; one multi). kazoo's Lock: 3 requests,
  3 waits (create, list, delete).
- Handoff, from the release to the next holder's grant (a lock, ttl at least ``QUEUE_TTL``).
  Before: the release's 2 (rewrite, delete), then the woken waiter's rewrite, list, rewrite
  with its ttl, read and set of the name's node: 7 requests, 7 waits in a row. Then: the
  release's multi, then the woken waiter's rewrite with its ttl: 2 waits in a row (and the
  fence in the background: a read and a set of the name's node; 4 requests), most waiters
  listing the queue first (the one ahead they watched was not the only one). Now: the
  release's multi, then nothing the woken waiter waits for: a waiter whose node ahead went
  after it was seen granted is first (``attempt``, "Granted from the queue"), and its grant's
  one multi (its node the holder's, the fence on the name's node) goes out unanswered
  (``attempt``, "Granted at the head, written after"): 2 requests, 1 wait. kazoo's Lock: a
  delete, then the woken waiter's list: 2 requests, 2 waits.

The first use of a name adds a read of its node (sent with the create). Each wait of a
queued waiter: before, a rewrite and a list on waking, a rewrite and a list again before
the watch, and a read of every node ahead; then a list, a rewrite, a read of the nearest
node ahead (a lock) and the watch, 4 waits; now the rewrite and the list in one round trip,
the read of the nearest node ahead (a lock) and the watch (a read of that node, which says
whether it was granted), 3 waits. A write of the node ahead costs the read that sets the
watch again, without waking. A blocking lock's refused first try keeps its node as its
place: its first wait rewrites it as queued beside the watch, in one round trip, where a
delete, then a create and a list, then the watch went before.

**Read-write and fair locks** (kind ``rwlock``, ``tenure.backends._ordered_queue`` for the rule
and the fence argument): the same nodes, with the mode in the node's name (``_nodes``).

- **Acquire, first try**: create the node with the holder's record, then rank: a writer is
  granted when no live node is ahead of it, a reader when no live write node is. Refused,
  the node stays as the waiter's place: rewritten at once, versioned, as a ``queued`` record
  with the place's ``queue_ttl``.
- **Waiting**: ``attempt``'s docstring.
- **Granted from the queue**, **release**, **renewal**, **break** as for locks; a waiter
  that gives up deletes its node. ``inspect`` reports every live node not marked queued and
  in its turn as a lease with its mode, and counts the other live ones as waiting (a first
  try's node is unmarked until ranked: ``_records``).
"""

from __future__ import annotations

import logging
import time
from typing import Any

from kazoo.exceptions import NoNodeError

from tenure._async.store import WITH_WEIGHTS
from tenure._errors import limit_mismatch
from tenure._types import Busy, Capabilities, Grant, Holder, Kind, LeaseSpec, LockInfo
from tenure.backends.zookeeper import SCHEMES
from tenure.backends.zookeeper._async.attempt import (
    AsyncZooKeeperAttempt,
    rewrite_op,
    rewritten,
)
from tenure.backends.zookeeper._async.grants import AsyncZooKeeperGrants
from tenure.backends.zookeeper._async.ranking import rank
from tenure.backends.zookeeper._async.refusal import Refused, refuse
from tenure.backends.zookeeper._async.session import entries
from tenure.backends.zookeeper._async.sweep import gc_reuse, sweep
from tenure.backends.zookeeper._config import ZooKeeperSettings, parse
from tenure.backends.zookeeper._errors import DRIVER_ERRORS
from tenure.backends.zookeeper._leases import QUEUE_TTL, Held, Place, holds_at_head
from tenure.backends.zookeeper._nodes import Record, decode_name, node_prefix
from tenure.backends.zookeeper._records import lock_info

__all__ = ["AsyncZooKeeperBackend"]

logger = logging.getLogger("tenure")


class AsyncZooKeeperBackend(AsyncZooKeeperGrants):
    """Options: ``namespace`` (the first node under the chroot, default ``tenure``),
    ``timeout`` (seconds for connecting and for each reply, default 5), ``session_timeout``
    (seconds, default 10). Credentials in the URL use digest authentication."""
    attempt_class = AsyncZooKeeperAttempt

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
    offers = WITH_WEIGHTS
    driver_errors = DRIVER_ERRORS
    notifies = True
    max_backoff = 0.5
    """The longest single wait: each wait rewrites the waiter's node first."""
    def __init__(self, settings: ZooKeeperSettings) -> None:
        super().__init__(settings)
        gc_after = settings.gc_after
        # The first pass of each kind one reuse period after the client began: a
        # short-lived client's releases cost no more requests than before.
        first = 0.0 if gc_after is None else time.monotonic() + gc_reuse(gc_after)
        self._sweeps: dict[str, tuple[float, int]] = {str(kind): (first, 0) for kind in Kind}
        """Per kind: when its next clean-up pass is due, and where it resumes."""

    @classmethod
    def from_url(cls, url: str, **options: Any) -> AsyncZooKeeperBackend:
        return cls(parse(url, options))

    async def release(self, kind: Kind, name: str, token: str) -> bool:
        released = await super().release(kind, name, token)
        await self._sweep_if_due(kind)
        return released

    async def _sweep_if_due(self, kind: Kind) -> None:
        """A pass over ``kind``'s idle names (``sweep``) when one is due. A pass that fails
        is tried again at the next due time: the release it follows is done either way."""
        gc_after = self.settings.gc_after
        due, cursor = self._sweeps.get(str(kind), (0.0, 0))
        if gc_after is None or time.monotonic() < due:
            return
        self._sweeps[str(kind)] = (time.monotonic() + gc_reuse(gc_after), cursor)
        try:
            cursor = await sweep(self.session, f"/{self.settings.namespace}/{kind}",
                                 gc_after, cursor)
        except Exception as exc:
            logger.debug("clean-up of idle %s names on %s failed: %r", kind,
                         self.describe(), exc)
            return
        self._sweeps[str(kind)] = (self._sweeps[str(kind)][0], cursor)

    async def acquire(
        self, name: str, spec: LeaseSpec, token: str, ttl: float, holder: Holder
    ) -> Grant | Busy:
        outcome = await self.join(name, spec, token, ttl, holder)
        return outcome if isinstance(outcome, Grant) else Busy(None)

    async def join(
        self, name: str, spec: LeaseSpec, token: str, ttl: float, holder: Holder, *,
        keep: bool = False,
    ) -> Grant | Place:
        """A first try: a new node, granted if nothing that counts is ahead of it; else the
        waiter's place (a read-write lock's is that node, queued, as is a queued permit's;
        so is a lock's when ``keep`` (a blocking acquire's first try) and it holds at the
        head (``holds_at_head``); any other lock's or permit's node is deleted, and its place
        is made by its first wait)."""
        kind, limit, mode = spec.kind, spec.limit, spec.mode
        parent = self._parent(kind, name)
        record = Record.new(holder, limit, ttl, value=spec.value, fair=spec.fair,
                            weight=spec.weight)
        epoch = self.session.epoch
        sent = time.monotonic()
        # One wait for two or three requests: the create, then the list of the queue, which
        # the server answers after the create, showing our node, and the name's node (for
        # the fence write) unless our last fence write of it says its version.
        created, children, *named = await self.session.call_together([
            ("create", (f"{parent}/{node_prefix(token, mode)}", record.encode()),
             {"ephemeral": True, "sequence": True, "makepath": True, "include_data": True}),
            ("get_children", (parent,), {}),
            *([] if self.session.fences.recorded(parent) else [("get", (parent,), {})]),
        ])
        if isinstance(created, Exception):
            raise created
        path, stat = created
        if isinstance(children, Exception) or path.rpartition("/")[2] not in children:
            # The name's node was new: kazoo made it after the list was answered.
            children, named = await self.session.call("get_children", parent), []
        ranked = await rank(
            self.session, parent, path, stat.mtime, limit=limit, mode=mode, children=children
        )

        def hold() -> Grant:
            self._granted_in(epoch, path)
            self._held[(kind, name, token)] = Held(
                path, stat.version, stat.mtime, record, epoch, stat.czxid,
                unrecorded=self._unrecorded(parent, stat.czxid, *named),
            )
            return Grant(stat.czxid)

        if ranked.conflict is None and ranked.granted(limit, mode, spec.weight):
            return hold()

        async def refused(final: tuple[Any, ...]) -> Refused | None:
            """``final`` applied while what refused our node stands (``refusal``); None
            when our node reached its turn meanwhile: it holds, untouched."""
            outcome = await refuse(
                self.session, parent, path, ranked, final, server_ms=stat.mtime, sent=sent,
                limit=limit, mode=mode, weight=spec.weight,
            )
            return outcome if isinstance(outcome, Refused) else None

        async def stays(place: Place, mark: bool) -> Grant | Place:
            """A refused node that stays as the waiter's ``place``: rewritten as queued when
            ``mark`` (a wait follows), else deleted (a later wait joins again)."""
            ended = await refused(
                rewrite_op(self.session, place) if mark else ("delete", path, stat.version)
            )
            if ended is None:
                return hold()
            if not mark or ended.answer is None:
                place.path = ""  # deleted (or gone meanwhile): a later wait joins again
            elif await rewritten(self.session, place, ended.answer):
                place.ahead = ended.ranked.standing  # the wait that follows watches from this
            return place

        if mode is not None:
            # A read-write lock's refused node stays, as this waiter's place in the queue.
            queued = Record.new(holder, limit, spec.queue_ttl or QUEUE_TTL, queued=True,
                                fair=spec.fair)
            place = Place(
                kind, name, token, limit, parent, queued, path=path, czxid=stat.czxid,
                mtime=stat.mtime, written_ttl_ms=record.ttl_ms, version=stat.version, mode=mode,
            )
            return await stays(place, mark=True)
        if spec.queues and ranked.conflict is None:
            # A queued (weighted FIFO) permit's refused node stays too, as its place, when
            # a wait follows (``keep``: a blocking acquire's first try), rewritten as queued
            # with the place's queue ttl; a try that gives up at once deletes it.
            queued = Record.new(holder, limit, spec.queue_ttl or QUEUE_TTL, queued=True,
                                weight=spec.weight)
            place = Place(
                kind, name, token, limit, parent, queued, path=path, czxid=stat.czxid,
                mtime=stat.mtime, written_ttl_ms=record.ttl_ms, version=stat.version,
            )
            return await stays(place, mark=keep)
        at_head = holds_at_head(kind, spec.value, ttl)
        queued = Record.new(holder, limit, QUEUE_TTL, queued=True, weight=spec.weight,
                            holds_at_head=at_head)
        if keep and at_head and ranked.conflict is None:
            # A blocking lock's refused node stays too, as its place: the wait that follows
            # rewrites it as queued, beside its watch of the node just ahead (this ranking's),
            # where deleting it and making another would cost a delete, a create and a list.
            return Place(
                kind, name, token, limit, parent, queued, path=path, czxid=stat.czxid,
                mtime=stat.mtime, written_ttl_ms=record.ttl_ms, version=stat.version,
                ahead=ranked.standing, unmarked=True, sent=sent, write_epoch=epoch,
            )
        deleted = await refused(("delete", path, stat.version))
        if deleted is None:
            return hold()
        if deleted.ranked.conflict is not None:
            raise limit_mismatch(name, deleted.ranked.conflict, limit)
        return Place(kind, name, token, limit, parent, queued, spec.value)

    async def inspect(self, kind: Kind, name: str) -> LockInfo | None:
        parent = self._parent(kind, name)
        # The server time first: a write of this session, so every read after it sees
        # every write committed before it began (ZooKeeper answers reads from the server
        # the session is on, which may lag the leader; a session always sees its own
        # writes, and a server applies writes in order). Read first, a lagging server
        # showed a holder another client's release had already deleted.
        now = await self.session.server_now()
        named, children = await self.session.call_together([
            ("get", (parent,), {}), ("get_children", (parent,), {}),
        ])
        if isinstance(named, NoNodeError):
            return None
        fence = int(named[0] or b"0")
        nodes = [] if isinstance(children, NoNodeError) else entries(children)
        answers = await self.session.call_many("get", [(f"{parent}/{n}",) for n in nodes])
        return lock_info(kind, name, fence=fence, now=now, nodes=nodes, answers=answers)

    async def list_records(self, kind: Kind, prefix: str) -> list[LockInfo]:
        await self.session.server_now()  # a write first, as in ``inspect``: no stale list
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
        nodes = await self.session.children(parent)
        answers = await self.session.call_many("get", [(f"{parent}/{n}",) for n in nodes])
        broken = False
        for node, answer in zip(nodes, answers, strict=True):
            # A node kept for a hold_at_least window stands for an older fence than its own.
            if not isinstance(answer, Exception) and Record.decode(answer[0]).fence_of(
                answer[1]
            ) in fences:
                broken = await self.session.delete(f"{parent}/{node}") or broken
        return broken
