"""The connection: one kazoo client per process, every call bounded; the only module that
calls kazoo.

kazoo runs its own I/O thread and offers ``*_async`` calls returning a result that thread
completes; ``io.result_of`` awaits it (asyncio) or waits for it (threads), so the backend is
written once for asyncio and generated for threads with no second copy of the logic. A
forked child opens its own client: kazoo's threads do not survive a fork.

Every error reaches the caller as kazoo raised it (the node errors a step decides on, and
the failures: connection lost, session expired), or as a ``TimeoutError`` naming the call
when no reply came within ``timeout``; the store's base turns the failures into its one
``BackendError`` form (``_errors.py``).

**The session's state, and why every interruption ends the leases granted before it.** A
holder's node is ephemeral: it lives as long as the session. The server ends a session
``session_timeout`` after the last packet it received from the client; kazoo learns that
the connection is in trouble only when a heartbeat goes unanswered, about two thirds of the
session timeout after its last send (``SUSPENDED``), and learns that the session ended only
once it reaches a server again (``LOST``). So at ``SUSPENDED`` the session may be about to
end, or may have ended already if the client was itself paused, and from that moment a
contender may be granted the name with a higher fence. Nothing local can prove otherwise:
the only proof of a live session is a reply from the server, and none is coming. tenure's
rule is to signal a loss rather than hide one, so ``SUSPENDED`` and ``LOST`` both end every
lease granted through the session before them (Curator's and kazoo's guidance too: treat
``SUSPENDED`` as "may have lost"). The alternative, keeping a lease through ``SUSPENDED``
until the last server contact plus some fraction of the session timeout in the hope of a
quick reconnect, would save few leases (kazoo reports ``SUSPENDED`` about two thirds of the
way to the session's end already) and would rest on the timeout the server negotiated and
on timers in two processes; the simple choice costs a re-acquire after a blip, never an
overlap. kazoo can also notice a dead connection late (every request postpones its next
heartbeat, so steady renewals can hide one): the backend's ``lease_horizon`` bounds every
lease by the clock as well, whatever the listener hears.

The session counts interruptions (``epoch``, raised by the state listener on ``SUSPENDED``
and ``LOST``); the backend records with each grant the epoch it was granted in, and doubts
every grant of an earlier epoch. When the connection comes back with the same session
(``CONNECTED`` before it expired) the ephemeral nodes of those grants still exist: nobody
believes in them any more, so the listener deletes them (``on_connected``), and any later
renewal, ``owned`` or release of them answers False without asking the server.
"""

from __future__ import annotations

import contextlib
import functools
import os
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import (
    BadVersionError,
    KazooException,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
)

from tenure._concurrency import async_io as io
from tenure._concurrency.listeners import Listeners
from tenure.backends.zookeeper._calls import commit, start
from tenure.backends.zookeeper._config import ZooKeeperSettings
from tenure.backends.zookeeper._fence_records import FenceRecords
from tenure.backends.zookeeper._nodes import is_entry, sequence_of

__all__ = ["DECIDING", "AsyncSession", "entries"]

DECIDING = (NoNodeError, BadVersionError, NodeExistsError, NotEmptyError)
"""Answers about nodes that a step decides on: not failures."""


INTERRUPTIONS_KEPT = 64
"""How many interruptions the session remembers the description of, for loss reasons."""

class AsyncSession:
    def __init__(self, settings: ZooKeeperSettings) -> None:
        self.settings = settings
        self._client: KazooClient | None = None
        self._pid = 0
        self._mutex = io.Mutex()
        self._started = threading.Event()
        self._starting = threading.Lock()
        self._lifecycle = threading.Lock()
        """Held while kazoo starts a client's threads and sockets (``start_async``) and while
        it stops one: a stop in the middle of that start found the connection's socket not
        made yet and raised (``'NoneType' object has no attribute 'send'``, from a client
        closed while its first connect, given up by a 0.5 s deadline, was still starting)."""
        self.epoch = 0
        """How many times the connection was suspended or the session lost: a grant made
        in an earlier epoch may be gone (module docstring). Only kazoo's thread raises it."""
        self._ended: dict[int, str] = {}
        """What ended each recent epoch, for the loss reason."""
        self.on_connected: Callable[[], object] | None = None
        """Called in kazoo's thread, without blocking, when the connection is (re)established."""
        self._doubt_listeners = Listeners()
        self.fences = FenceRecords()
        """The names' last fences this session wrote (``record_soon``)."""

    # ---- the session's state -------------------------------------------------------------

    def interruption_since(self, epoch: int) -> str | None:
        """Why a grant made in ``epoch`` may be gone (None: no interruption since)."""
        if epoch == self.epoch:
            return None
        what = self._ended.get(epoch, "was interrupted")
        return (
            f"the ZooKeeper session it was granted through {what}: the server may have "
            f"ended the session and granted the lease to another holder"
        )

    def add_doubt_listener(self, listener: Callable[[], object]) -> None:
        """``listener`` is called (in kazoo's thread) at each interruption; a bound method is
        held weakly."""
        self._doubt_listeners.add(listener)

    def _state_changed(self, state: str) -> None:
        """kazoo's state listener, run in its connection thread: must not block."""
        if state == KazooState.CONNECTED:
            hook = self.on_connected
            if hook is not None:
                hook()
            return
        what = (
            "was suspended (no answer to a heartbeat)" if state == KazooState.SUSPENDED
            else "was lost (expired or closed)"
        )
        self._ended[self.epoch] = f"{what} at monotonic {time.monotonic():.3f}"
        self._ended.pop(self.epoch - INTERRUPTIONS_KEPT, None)
        self.epoch += 1
        self.doubt_now()

    def doubt_now(self) -> None:
        """Call the doubt listeners (safe in kazoo's threads): a lease may be doubted now."""
        self._doubt_listeners.call_all()  # (a listener's failure never breaks kazoo's loop)

    def unanswered(self, seconds: float) -> TimeoutError:
        """What kept a call from being answered within ``seconds``, for the BackendError the
        lock logic raises when its deadline ends the wait (kazoo keeps its connection
        errors to its log: none to chain)."""
        client = self._client
        if client is None or not client.connected:
            what = (
                "no session was established with any of its servers (kazoo was still "
                "trying to connect: refused, unreachable or not answering)"
            )
        else:
            what = "the session was up, but no server answered"
        return TimeoutError(
            f"ZooKeeper {self.settings.display}: no answer within {seconds:.3f} s: {what}"
        )

    def delete_soon(self, path: str, version: int = -1) -> None:
        """Delete ``path`` (guarded by ``version``) without waiting for the answer (safe in
        kazoo's thread): a node of ours that nobody believes in any more. A failure changes
        nothing that matters: the node is gone already, or goes with the session, or is
        judged expired by its ttl."""
        with self._mutex:
            client = self._client if self._pid == os.getpid() else None
        if client is not None:
            with contextlib.suppress(Exception):
                start(client, "delete", path, version=version)

    # ---- calls ----------------------------------------------------------------------------

    async def client(self) -> KazooClient:
        with self._mutex:
            if self._pid != os.getpid() or self._client is None:
                self._client = KazooClient(
                    hosts=self.settings.hosts,
                    timeout=self.settings.session_timeout,
                    auth_data=[("digest", ":".join(self.settings.auth))]
                    if self.settings.auth else None,
                )
                self._client.add_listener(self._state_changed)
                self._pid = os.getpid()
                self._started = threading.Event()
            client, started = self._client, self._started
        if not started.is_set():
            await io.run_blocking(self._start_once, client, started)
        return client

    def _start_once(self, client: KazooClient, started: threading.Event) -> None:
        """Connect, once per client: kazoo's ``start`` on a client that is reconnecting
        would close it and end its session (and every node it holds), so a started client
        is never started again; kazoo reconnects it by itself."""
        with self._starting:
            if started.is_set():
                return
            with self._lifecycle:
                with self._mutex:
                    closed = self._client is not client
                if closed:  # closed before its start began: never started, nothing to stop
                    raise ConnectionError("the client was closed before it connected")
                live = client.start_async()
            # kazoo's ``start``, with its two steps apart: the wait below holds no lock, so a
            # close meanwhile stops the client (kazoo stops one that is still connecting).
            live.wait(timeout=self.settings.timeout)
            if not client.connected:
                with contextlib.suppress(Exception):
                    _stop(client, self._lifecycle)
                raise ConnectionError(
                    f"cannot connect within {self.settings.timeout} s: no session was "
                    "established"
                )
            started.set()

    async def call(self, operation: str, *args: Any, **kwargs: Any) -> Any:
        """kazoo's ``<operation>`` call's result within ``timeout`` seconds."""
        client = await self.client()
        result = start(client, operation, *args, **kwargs)
        try:
            return await io.result_of(result, self.settings.timeout)
        except TimeoutError as exc:
            raise self._timeout(operation) from exc

    async def commit_soon(self, operations: Sequence[tuple[Any, ...]]) -> Any:
        """``operations`` as one ``multi`` (``commit``), sent without waiting: its kazoo
        result, whose value is each operation's answer, or each one's error when one
        failed."""
        client = await self.client()
        return commit(client, operations)

    async def answered(self, result: Any) -> bool:
        """Wait (within ``timeout``) for a request sent without waiting (``commit_soon``);
        whether it was answered (its answer, or its error, is read off ``result``)."""
        with contextlib.suppress(Exception):
            await io.result_of(result, self.settings.timeout)
        return bool(result.ready())

    async def call_many(
        self, operation: str, calls: Sequence[tuple[Any, ...]]
    ) -> list[Any]:
        """Several ``operation`` calls sent at once (kazoo pipelines them on its connection);
        each one's answer, or the node error it got (``DECIDING``) in its place."""
        return await self.call_together([(operation, args, {}) for args in calls])

    async def call_together(
        self, calls: Sequence[tuple[str, tuple[Any, ...], dict[str, Any]]]
    ) -> list[Any]:
        """Several calls, each ``(operation, args, kwargs)``, sent at once: one wait for
        their answers, not one per call. ZooKeeper answers one session's requests in the
        order sent, a read seeing every earlier write of the session (a create, then a list
        that shows the node created). Each one's answer, or the node error it got
        (``DECIDING``) in its place."""
        client = await self.client()
        pending = [(operation, start(client, operation, *args, **kwargs))
                   for operation, args, kwargs in calls]
        if len(pending) > 1:
            # The last answer first: kazoo's thread completes them in the order sent, so
            # once it is in, so is every earlier one, and this caller wakes once for all
            # of them, not once per answer.
            try:
                await io.result_of(pending[-1][1], self.settings.timeout)
            except TimeoutError as exc:
                unanswered = next(op for op, result in pending if not result.ready())
                raise self._timeout(unanswered) from exc
            except Exception:  # its own answer, read in its turn below
                pass
        answers: list[Any] = []
        for operation, result in pending:
            try:
                answers.append(await io.result_of(result, self.settings.timeout))
            except DECIDING as exc:
                answers.append(exc)
            except TimeoutError as exc:
                raise self._timeout(operation) from exc
        return answers

    async def commit(self, operations: Sequence[tuple[Any, ...]]) -> list[Any]:
        """``operations`` as one ``multi`` (``_calls.commit``), applied all or none: each
        one's answer, or, when one failed, each one's error (the node error that failed it,
        kazoo's ``RolledBackError`` or ``RuntimeInconsistency`` for the others)."""
        client = await self.client()
        try:
            answers: list[Any] = await io.result_of(
                commit(client, operations), self.settings.timeout
            )
        except TimeoutError as exc:
            raise self._timeout("multi") from exc
        return answers

    # ---- node steps every verb uses --------------------------------------------------------

    async def children(self, parent: str) -> list[str]:
        """The holders' and waiters' nodes under a name's node, oldest first."""
        try:
            nodes: list[str] = await self.call("get_children", parent)
        except NoNodeError:
            return []
        return entries(nodes)

    async def delete(self, path: str, version: int = -1) -> bool:
        """Delete ``path`` (guarded by ``version``); False if it was gone or rewritten."""
        try:
            await self.call("delete", path, version=version)
        except DECIDING:
            return False
        return True

    @property
    def clock(self) -> str:
        """A node written only for the ``mtime`` of the write: the server's time."""
        return f"/{self.settings.namespace}/clock"

    async def make_clock(self) -> None:
        with contextlib.suppress(NodeExistsError):
            await self.call("create", self.clock, b"", makepath=True)

    async def server_now(self) -> int:
        """The server's time in milliseconds: the ``mtime`` of a write of our own."""
        try:
            stat = await self.call("set", self.clock, b"")
        except NoNodeError:
            await self.make_clock()
            stat = await self.call("set", self.clock, b"")
        mtime: int = stat.mtime
        return mtime

    def record_soon(
        self, path: str, fence: int, version: int | None, *, guess: bool = True
    ) -> Any:
        """``FenceRecords.record_soon`` through this session's client, without waiting."""
        with self._mutex:
            client = self._client if self._pid == os.getpid() else None
        if client is None:
            raise ConnectionError("not connected (the session was closed)")
        return self.fences.record_soon(client, path, fence, version, guess=guess)

    def watch_soon(
        self, path: str, watch: Callable[[Any], object], seen: Callable[[Any], object],
        gone: Callable[[], object], failed: Callable[[], object],
    ) -> None:
        """Set ``watch`` on ``path`` again without waiting (safe in kazoo's thread), by a
        read of the node: ``seen`` is called with its ``(data, stat)``, ``gone`` if the node
        no longer exists, ``failed`` if the request failed."""
        with self._mutex:
            client = self._client if self._pid == os.getpid() else None
        if client is None:
            failed()
            return

        def answered(result: Any) -> None:
            if isinstance(result.exception, NoNodeError):
                gone()
            elif not result.successful():
                failed()
            else:
                seen(result.get(block=False))

        try:
            start(client, "get", path, watch=watch).rawlink(answered)
        except (KazooException, OSError):
            failed()

    async def settled(self, result: Any) -> None:
        """Wait (within ``timeout``) for a ``record_soon`` to be done; a record that takes
        longer is left to finish by itself."""
        with contextlib.suppress(TimeoutError):
            await io.result_of(result, self.settings.timeout)

    def _timeout(self, operation: str) -> TimeoutError:
        return TimeoutError(f"no reply to {operation} within {self.settings.timeout} s")

    async def aclose(self) -> None:
        with self._mutex:
            client, self._client = self._client, None
            pid, self._pid = self._pid, 0
        if client is not None and pid == os.getpid():
            # kazoo's stop waits for its connection thread, which may be in a connect attempt
            # to a dead server for up to the session timeout: not worth waiting for, the
            # thread ends on its own and the session with it.
            with contextlib.suppress(io.DeadlineExceeded):
                await io.bounded(
                    functools.partial(io.run_blocking, _stop, client, self._lifecycle),
                    STOP_LIMIT,
                )


STOP_LIMIT = 1.0
"""Seconds ``aclose`` waits for kazoo to stop."""


def entries(nodes: list[str]) -> list[str]:
    """The holders' and waiters' nodes among a name's children, oldest first."""
    return sorted((n for n in nodes if is_entry(n)), key=sequence_of)


def _stop(client: KazooClient, lifecycle: threading.Lock) -> None:
    """Stop and close ``client``, never in the middle of its start (``_lifecycle``)."""
    with lifecycle:
        client.stop()
    client.close()
