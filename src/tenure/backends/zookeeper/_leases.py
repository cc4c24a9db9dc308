"""What this process keeps of its nodes between calls, for both flavours: a granted node
(``Held``, one per lease, kept by the store) and a waiter's place in a name's queue
(``Place``, kept by one acquire call's attempt). Plain data: the steps that write them
are in ``_async/``."""

from __future__ import annotations

import copy
import dataclasses
import threading
import time
from typing import Any

from tenure._types import Kind
from tenure.backends.zookeeper._nodes import Record

__all__ = ["GRANT_UNWRITTEN", "QUEUE_TTL", "Held", "Place", "holds_at_head"]

QUEUE_TTL = 2.0
"""Seconds a waiter's node outlives its last rewrite, as judged by the others."""

GRANT_UNWRITTEN = 1 / 3
"""The part of ``QUEUE_TTL`` after a write of a waiter's node within which the waiter, once
at the head, takes the grant without writing first (``_async/attempt.py``, "Granted from the
queue"): the write that makes its node the holder's then has as long again, and a third
left over, before the place could lapse by the server's clock (the same margin as the
session's, ``SESSION_TRUST``)."""


def holds_at_head(kind: str, value: str | None, ttl: float) -> bool:
    """Whether a waiter's node holds the lease as soon as it is first (``Record.holds_at_head``):
    a lock's, with no election value for its grant to write, whose ttl is at least its
    place's (the place's lease, which it holds on until its grant's write, never outlasts
    the holder's)."""
    return kind == Kind.LOCK and value is None and ttl >= QUEUE_TTL


@dataclasses.dataclass
class Held:
    """What this process knows of one of its granted nodes."""

    path: str
    version: int
    mtime: int
    """Server milliseconds of our last write to it."""
    record: Record
    epoch: int
    """The session epoch it was granted in: once the session's epoch moved on, the
    connection was suspended or the session lost since, and the grant is doubted."""
    fence: int
    """The node's ``czxid``: the grant's fence."""
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
    multi, or the first renewal in the background (``_async/store.py``, "Requests")."""
    written_ttl_ms: int = dataclasses.field(init=False, default=0)
    """The ttl our last write (the one at ``version``) gave the node. ``record`` may carry a
    newer ttl already, written by a renewal still out."""
    granting: Any = None
    """The multi that makes a waiter's node, granted at the head of the queue, the holder's
    and writes its fence to the name's node (``_async/attempt.py``, "Granted at the head,
    written after"), sent without waiting: its kazoo result, until its answer is applied
    (``AsyncZooKeeperGrants._conclude_grant``)."""
    parent: str = ""
    """The name's node that multi writes the fence to."""
    grant_unanswered_after: float = 0.0
    """Monotonic time past which that write, still unanswered, can no longer vouch for the
    lease: the place it was granted on may have lapsed by the server's clock."""
    grant_lost: str | None = None
    """Why that write found the lease gone (its node deleted, or its place lapsed first)."""
    grant_mutex: threading.Lock = dataclasses.field(
        init=False, default_factory=threading.Lock, repr=False, compare=False
    )
    """Applies that write's answer once: kazoo's callback thread and a caller that waited
    for it may both try."""

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

    def known(self) -> Held:
        """A copy of what we know now (its own mutex), for a release to move on alone."""
        with self.mutex:
            known = copy.copy(self)
        known.mutex = threading.Lock()
        return known


@dataclasses.dataclass
class Place:
    """A waiter's state between its tries and waits (``_async/attempt.py``)."""

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
    woken: bool = False
    """The last wait ended by its watch (or found nothing to watch), not by its timeout: the
    next try lists the queue before it rewrites the node."""
    unmarked: bool = False
    """The node still holds the first try that made it (a lock's refused node, kept as its
    place): the next wait rewrites it as ``record``, the queued one, whatever ``ahead`` is."""
    sent: float = 0.0
    """Monotonic time just before the node's latest write was sent: by the server's clock it
    lives until at least that plus its ttl (``GRANT_UNWRITTEN``)."""
    write_epoch: int = -1
    """The session epoch that write was sent in (``session``'s docstring)."""

    def sending(self, epoch: int) -> None:
        """A write of the node is about to be sent, in session epoch ``epoch``."""
        self.sent, self.write_epoch = time.monotonic(), epoch

    def wrote(self, stat: Any, ttl_ms: int) -> bool:
        """Record a write of the node; False if the write before it had already lapsed by the
        server's clock (``_async/attempt.py``: the node must then go)."""
        lapsed = self.mtime + self.written_ttl_ms < stat.mtime
        self.version, self.mtime, self.written_ttl_ms = stat.version, stat.mtime, ttl_ms
        return not lapsed

