"""ZooKeeper for asyncio: the verbs about one granted node, which only this process writes
(others only delete it), and what the session says about it; ``store`` makes the grants,
``attempt`` those from the queue.

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
- **Release inside a ``hold_at_least`` window**: the node is replaced by a persistent one
  that keeps the name for the window (``window``'s docstring).
- **The name's last fence** (its node's data, for ``inspect`` once no node holds it; it
  never goes back: every write of it is versioned after a read, or after our own write,
  showing a lower number, but a grant's at the head of the queue, ``attempt``'s docstring
  says why that one needs no version): a first try's fence is written by its release's
  multi, or, if the lease is renewed first, in the background with the first renewal, or by
  a break of it; a fence granted at the head of the queue by the grant's own multi (sent
  without waiting: the release waits for its answer); any other fence granted from the
  queue in the background right after the grant (the release waits for it). A holder
  whose session ends before its release or renewal leaves the previous fence there (the
  node shows its own while it lives, and the next grant's is higher); the same was true
  before of a holder that ended between its grant and the fence's own write.
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
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from typing import Any

from kazoo.exceptions import BadVersionError, NoNodeError

from tenure._async.store import AsyncStore
from tenure._types import Kind, Renewal
from tenure.backends.zookeeper._async.session import AsyncSession
from tenure.backends.zookeeper._async.window import hold_over
from tenure.backends.zookeeper._config import ZooKeeperSettings
from tenure.backends.zookeeper._leases import Held
from tenure.backends.zookeeper._nodes import Record, encode_name, token_of

__all__ = ["SESSION_TRUST", "AsyncZooKeeperGrants"]

SESSION_TRUST = 2 / 3
"""The fraction of the session timeout a grant or renewal vouches for a lease
(``lease_horizon``). The server ends a session it has not heard from for the session timeout,
counted from when it last heard from us, which is after the request that vouched for the
lease was sent; the client counts from before sending. The third left over absorbs timer
slack, a renewal scheduler woken late, and a server that negotiated a somewhat shorter
timeout than asked for (its ``minSessionTimeout``/``maxSessionTimeout``); it is kazoo's own
read timeout too. Renewals go at a third of it."""


class AsyncZooKeeperGrants(AsyncStore):
    """The granted nodes of one process (``_held``), over one session."""

    def __init__(self, settings: ZooKeeperSettings) -> None:
        self.settings = settings
        self.session = AsyncSession(settings)
        self.session.on_connected = self._forsake_doubted
        self._held: dict[tuple[str, str, str], Held] = {}
        """Our granted nodes, by (kind, name, token)."""

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

    def lease_doubt(self, kind: Kind, name: str, token: str) -> str | None:
        held = self._held.get((kind, name, token))
        if held is None:
            return None
        if held.granting is not None:
            self._conclude_grant(held)
            if held.granting is not None and time.monotonic() >= held.grant_unanswered_after:
                return (
                    "the write making its node the holder's, granted at the head of the "
                    "queue, is still unanswered: the place it was granted on may have lapsed "
                    "by the server's clock"
                )
        if held.grant_lost is not None:
            return held.grant_lost
        return self.session.interruption_since(held.epoch)

    def add_doubt_listener(self, listener: Callable[[], object]) -> None:
        self.session.add_doubt_listener(listener)

    def _doubted(self, held: Held) -> bool:
        return held.epoch != self.session.epoch

    def _forsake(self, held: Held) -> None:
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

    # ---- a grant at the head of the queue, written after it was taken -------------------

    async def _granted(self, held: Held) -> bool:
        """Whether ``held`` is still ours as far as its grant goes: a grant at the head of
        the queue (``attempt``, "Granted from the queue") waits here for the write that
        makes its node the holder's (within ``timeout``) and applies its answer; False if
        that write found the lease gone, or is still unanswered."""
        if held.granting is not None:
            await self.session.answered(held.granting)
            self._conclude_grant(held)
        return held.granting is None and held.grant_lost is None

    def _conclude_grant(self, held: Held) -> None:
        """Apply the answer of the multi granting ``held`` at the head of the queue, once
        it has come (kazoo's callback thread, or a caller: the first applies it). Written,
        the node is the holder's, unless its previous write, the place's, had lapsed by the
        new write's ``mtime`` (a contender may have passed it: the node goes); the fence is
        on the name's node either way. Refused (the node was deleted as expired or broken:
        nothing written) or failed, the lease is lost. A loss is announced to the doubt
        listeners (the renewal scheduler reports it)."""
        with held.grant_mutex:
            result = held.granting
            if result is None or not result.ready():
                return
            answers = result.get(block=False) if result.successful() else [result.exception]
            stat, fenced = answers[0], answers[-1]
            if isinstance(stat, Exception):
                held.grant_lost = (
                    "the write making its node the holder's, granted at the head of the "
                    f"queue, failed: {stat!r}"
                )
            else:
                self.session.fences.remember(held.parent, held.fence, fenced.version)
                if held.lapsed_before(stat.mtime):
                    held.grant_lost = (
                        "its place in the queue had lapsed by the server's clock before the "
                        "write that made it the holder's: another holder may have passed it"
                    )
                    self.session.delete_soon(held.path, stat.version)
                else:
                    held.wrote(stat, held.record.ttl_ms)
            held.granting = None
        if held.grant_lost is not None:
            self.session.doubt_now()

    def _granted_in(self, epoch: int, path: str) -> None:
        """Raise if the session was interrupted while a grant was being made: it may
        already be void. The caller's undo removes the node."""
        if self.session.epoch != epoch:
            # Said as a driver would say it (a connection that went away; ``_errors``): a
            # caller deciding whether a retry can cure it reads the BackendError's cause.
            raise ConnectionError(
                f"the ZooKeeper session's connection was interrupted while {path} was being "
                "granted"
            )

    # ---- election values: a field of the holder's entry ------------------------------

    async def set_value(self, name: str, token: str, value: str) -> bool:
        held = self._held.get((Kind.LOCK, name, token))
        if held is None:
            return False
        if self._doubted(held) or not await self._granted(held):
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
            await self.session.delete(held.path, stat.version)
            return False
        held.wrote(stat, held.record.ttl_ms)
        return True

    async def _write_held(self, held: Held) -> Any:
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

    def _parent(self, kind: str, name: str) -> str:
        return f"/{self.settings.namespace}/{kind}/{encode_name(name)}"

    async def release(self, kind: Kind, name: str, token: str) -> bool:
        held = self._held.pop((kind, name, token), None)
        if held is None:
            # An undo: remove any node this token may have written, and say nothing was held.
            parent = self._parent(kind, name)
            for node in await self.session.children(parent):
                if token_of(node) == token:
                    await self.session.delete(f"{parent}/{node}")
            return False
        held.released = True
        if self._doubted(held) or not await self._granted(held):
            self._forsake(held)
            return False
        try:
            return await self._release_held(held)
        finally:
            if held.fence_record is not None:
                await self.session.settled(held.fence_record)

    async def release_after(self, kind: Kind, name: str, token: str, seconds: float) -> bool:
        # The node goes with the holder's session: ``window`` replaces it by a persistent one
        # for the window, after the first try's fence is on the name's node (shown there
        # once the window is over).
        held = self._held.pop((kind, name, token), None)
        if held is None:
            return False
        held.released = True
        if self._doubted(held) or not await self._granted(held):
            self._forsake(held)
            return False
        self._record_unrecorded(held)
        if held.fence_record is not None:
            await self.session.settled(held.fence_record)
        return await hold_over(self.session, held, seconds)

    async def _release_held(self, held: Held) -> bool:
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
                write = ("set_data", self.session.clock, b"", -1)
            stat, deleted = await self.session.commit([
                write, ("delete", held.path, known.version),
            ])
            if not isinstance(stat, Exception):
                if write[1] != self.session.clock and unrecorded is not None:
                    self.session.fences.remember(unrecorded[0], unrecorded[1], stat.version)
                break
            if isinstance(stat, NoNodeError):
                if write[1] != self.session.clock:
                    unrecorded = None  # the name's node is gone: nothing to keep it on
                await self.session.make_clock()
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
                await self.session.delete(held.path, latest.version)
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

    async def extend_many(self, renewals: Sequence[Renewal]) -> list[bool]:
        # One batch whatever the kinds: each lease is its own node, keyed by its kind.
        helds = [self._held.get((r.kind, r.name, r.token)) for r in renewals]
        for index, held in enumerate(helds):
            if held is not None and (self._doubted(held) or not await self._granted(held)):
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
                await self.session.delete(held.path, stat.version)
                results.append(False)
                continue
            held.record = held.record.with_ttl(renewal.ttl)
            held.wrote(stat, held.record.ttl_ms)
            self._record_unrecorded(held)
            results.append(True)
        return results

    async def owned(self, kind: Kind, name: str, token: str) -> bool:
        held = self._held.get((kind, name, token))
        if held is None or self._doubted(held) or not await self._granted(held):
            return False
        known = held.known()  # before the read: a renewal's answer may move it on
        now = await self.session.server_now()
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
        return parent, fence, self.session.fences.recorded_version(parent, fence)

    def _record_unrecorded(self, held: Held) -> None:
        """Write a first try's fence in the background (a renewal: the lease lives on)."""
        if held.unrecorded is not None and held.fence_record is None:
            parent, fence, version = held.unrecorded
            held.unrecorded = None
            held.fence_record = self.session.record_soon(parent, fence, version)
