"""An etcd acquire's first try, for every kind, and the place a refused one leaves.

- A lock or a semaphore: ONE transaction, which writes the key on a spare (or new) lease. A
  lock writes only if the name has no key at all (a compare on the whole range), so it never
  barges past waiters, and the same transaction puts the name's fence key; a semaphore
  writes, and its key is granted if it is among the ``limit`` oldest, else deleted (and its
  fence key written by a second request). Refused: the lease it wrote on stays ready in the
  place, for the grant (``attempt``). A blocking lock's first try (``queue``) that is
  refused writes its key, marked queued, on a spare queue lease in the same transaction's
  failure branch, and reads it back with the key just ahead: a place at the back of the
  queue without a join after it. Only a spare that lasts without a request is used (one
  left by an earlier wait of this process): a new queue lease would cost an uncontended
  acquire a grant; without one the first wait joins. That failure branch writes only if no
  key of ours is there, so a resend whose first answer was lost finds its grant (or its
  place) rather than queueing behind itself.
- A read-write lock: two leases (spares or new: the holder's, and the place's ``queue_ttl``
  rounded up to whole seconds) and ONE transaction: if no key at all (a writer) or no write
  key (a reader) exists under the name, it writes the key on the holder lease and puts the
  fence key: granted, fence = its creation revision; otherwise it writes the key marked
  ``queued`` on the queue lease: a place at the back of the queue, in the same step. The
  lease the transaction did not use stays a spare (the queue lease) or is kept for the grant
  (the holder lease).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from tenure._errors import limit_mismatch
from tenure._types import Busy, Grant, Holder, Kind, LeaseSpec
from tenure.backends.etcd._async.pool import Lease, lease_seconds, whole_seconds
from tenure.backends.etcd._errors import NotFound
from tenure.backends.etcd._keys import Record, b64, entry_name, name_prefix, unb64
from tenure.backends.etcd._records import lease_of
from tenure.backends.etcd._statements import (
    JSON,
    blocking,
    created_at,
    empty,
    fence_here,
    kvs,
    oldest,
    put,
    revision,
)

if TYPE_CHECKING:
    from tenure.backends.etcd._async.store import AsyncEtcdBackend

__all__ = ["QUEUE_TTL", "Held", "Outcome", "QueuePlace", "first_try", "newest_two", "placed"]

QUEUE_TTL = 2
"""Seconds a waiter's place in the queue outlives its last wait (etcd's smallest useful
lease: below the server's minimum TTL it is raised anyway)."""


@dataclasses.dataclass
class Held:
    """What this process knows of one of its granted keys."""

    key: str
    lease: Lease
    revision: int
    record: Record
    """What the key holds, rewritten whole when an election's value changes."""


@dataclasses.dataclass
class QueuePlace:
    """A waiter's place: what its first try left ready, and its key once queued."""

    kind: str
    name: str
    key: str
    limit: int
    record: str
    value: str | None = None
    """The election value the key gets when it is granted (None: a lock or a permit)."""
    revision: int = 0
    """The key's creation revision once queued (0: not queued, or lapsed)."""
    lease: Lease | None = None
    """The short queue lease the key is on."""
    watch_from: int = 0
    mode: str | None = None
    """A read-write lock's mode (None: a lock or a semaphore, ranked by ``limit``)."""
    queue_seconds: int = QUEUE_TTL
    """The queue lease's length."""
    holder_lease: Lease | None = None
    """The lease the key moves onto when granted, kept alive with the queue lease."""
    predecessor: str | None = None
    """The key just ahead that the next wait watches (base64), as the last step read it."""
    predecessor_known: bool = False
    """Whether ``predecessor`` is fresh (None then: nothing ahead); a wait uses it once."""
    woken: bool = True
    """Whether the last wait may have seen the key ahead go (a deletion, an error: anything
    but a quiet timeout). After a quiet one the next step reads before it tries to write."""


Outcome = tuple[Grant | Busy, QueuePlace | None]
"""A first try's answer: granted (and no place), or refused with the place a wait starts
from (its key already queued when the try queued at once)."""


async def first_try(
    store: AsyncEtcdBackend, name: str, spec: LeaseSpec, *, token: str, ttl: float,
    holder: Holder, kept: Lease | None, queue: bool = False,
) -> Outcome:
    """Granted, or refused with the place a wait starts from (``kept``: the holder lease
    a refused try of the same attempt left ready). ``queue``: a lock's try that, refused,
    writes its key at the back of the queue in the same transaction (a blocking acquire's
    first try), when a spare queue lease lasts without a request; else the first wait
    joins."""
    kind, limit = str(spec.kind), spec.limit
    prefix = name_prefix(store.settings.namespace, kind, name)
    if spec.mode is not None:
        queue_seconds = QUEUE_TTL if spec.queue_ttl is None else whole_seconds(spec.queue_ttl)
        return await _first_in_turn(
            store, kind, name, token=token, ttl=ttl, holder=holder, mode=spec.mode,
            queue_seconds=queue_seconds, kept=kept,
        )
    key = prefix + token
    record = Record.new(holder, limit, value=spec.value, ttl=ttl)
    queued = Record.new(holder, limit, queued=True).encode()
    lease = await store.pool.lasting(lease_seconds(ttl), ttl, kept)
    queue_lease = store.pool.ready(QUEUE_TTL, QUEUE_TTL / 2) if (
        queue and limit == 1) else None

    def first(lease: Lease) -> JSON:
        written = put(key, record.encode(), lease.id)
        if limit > 1:
            return {"success": [written, oldest(prefix, limit)]}
        # A lock is written only into an empty range: never past a queued waiter; the
        # same step records the fence.
        failure = [oldest(prefix, 1)]
        if queue_lease is not None:
            # Refused: our key at the back of the queue, unless a key of ours is there
            # already (a resend of a request whose answer was lost: granted, or queued),
            # then our key and the newest keys, to learn the one just ahead.
            failure = [
                {"request_txn": {"compare": [created_at(key, 0)],
                                 "success": [put(key, queued, queue_lease.id)]}},
                {"request_range": {"key": b64(key)}}, newest_two(prefix),
            ]
        return {
            "compare": [empty(prefix)],
            "success": [written, fence_here(store.fence_key(kind, name)), oldest(prefix, 1)],
            "failure": failure,
        }

    try:
        answer, lease = await store.pool.on_lease(first, lease)
    except NotFound:
        if queue_lease is None:
            raise
        # The spare queue lease ended before use (a break, or an expiry): the first wait
        # joins instead.
        queue_lease = None
        answer, lease = await store.pool.on_lease(first, lease)
    if queue_lease is not None and not answer.get("succeeded"):
        return await _queued_at_once(
            store, answer, lease, queue_lease, kind=kind, name=name, key=key, token=token,
            queued=queued, value=spec.value,
        )
    if queue_lease is not None:
        await store.pool.keep_spare(queue_lease)
    ranked = kvs(answer["responses"][-1])
    mine = next((kv for kv in ranked if unb64(kv["key"]).decode() == key), None)
    stored = [Record.decode(kv.get("value", "")).limit for kv in ranked if kv is not mine]
    conflict = next((s for s in stored if s != limit), None)
    if mine is not None and conflict is None:
        created = int(mine["create_revision"])
        if mine.get("lease") != lease.id:  # a retry found the key its lost reply wrote
            await store.pool.keep_spare(lease)
            # That lease's clock restarts now: the holder gets its whole ttl from here.
            lease = Lease(lease_of(mine), lease.seconds, 0.0)
            await store.pool.refresh([lease])
            record = Record.decode(mine.get("value", ""))  # and keeps what it stored
        store.remember(kind, name, token, Held(key, lease, created, record))
        if limit > 1:
            await store.record_fence(kind, name, created)
        return Grant(created), None
    if limit > 1:
        # Our key is written, not among the limit oldest: it goes, its lease stays ours.
        await store.gateway.post("/v3/kv/deleterange", {"key": b64(key)})
    if conflict is not None and kind == Kind.SEMAPHORE:
        await store.pool.keep_spare(lease)
        raise limit_mismatch(name, conflict, limit)
    return Busy(None), QueuePlace(kind, name, key, limit, queued, spec.value,
                                  holder_lease=lease)


def newest_two(prefix: str) -> JSON:
    """A read of the two newest keys of the range (names only): with a key just written,
    it and the one just ahead of it."""
    newest = oldest(prefix, 2)
    newest["request_range"] |= {"sort_order": "DESCEND", "keys_only": True}
    return newest


def placed(place: QueuePlace, answer: JSON, mine: JSON, newest: list[JSON]) -> None:
    """Note in ``place`` its key as a transaction that wrote it read it back (``mine``),
    with the ``newest`` keys of the range read in the same step (``newest_two``)."""
    place.revision = int(mine["create_revision"])
    place.watch_from = revision(answer) + 1
    # The newest key other than ours is the one just ahead when ours is the newest, as
    # a new key is; a key of ours that outlived its lapsed place keeps its old creation
    # revision, and then the wait reads the key ahead itself.
    others = [kv for kv in newest if kv["key"] != mine["key"]]
    place.predecessor_known = not others or int(others[0]["create_revision"]) < place.revision
    place.predecessor = others[0]["key"] if others and place.predecessor_known else None


async def _queued_at_once(
    store: AsyncEtcdBackend, answer: JSON, lease: Lease, queue_lease: Lease, *, kind: str,
    name: str, key: str, token: str, queued: str, value: str | None,
) -> Outcome:
    """A lock's first try refused, its key queued in the same step (or found there, from
    an earlier send of that request): the place, or the grant a lost answer held back."""
    _, ours, newest = (kvs(response) for response in answer["responses"])
    mine = ours[0]
    if lease_of(mine) != queue_lease.id:
        # Not written by this send: a resend of the first try found the key the first
        # send wrote, granted (on our holder lease) or queued (on the queue lease).
        await store.pool.keep_spare(queue_lease)
        record = Record.decode(mine.get("value", ""))
        if lease_of(mine) == lease.id and not record.queued:
            created = int(mine["create_revision"])
            store.remember(kind, name, token, Held(key, lease, created, record))
            return Grant(created), None
        # On no lease of this try's: the first wait joins again (the key keeps its place).
        return Busy(None), QueuePlace(kind, name, key, 1, queued, value, holder_lease=lease)
    place = QueuePlace(kind, name, key, 1, queued, value, lease=queue_lease,
                       holder_lease=lease)
    placed(place, answer, mine, newest)
    return Busy(None), place


async def _first_in_turn(
    store: AsyncEtcdBackend, kind: str, name: str, *, token: str, ttl: float, holder: Holder,
    mode: str, queue_seconds: int, kept: Lease | None,
) -> Outcome:
    """A read-write lock's first try: granted, or queued, in one transaction."""
    held = store.granted(kind, name, token)
    if held is not None and await store.pool.keep_alive(held.lease):
        return Grant(held.revision), None  # a retry of a grant whose answer was lost
    prefix = name_prefix(store.settings.namespace, kind, name)
    key = prefix + entry_name(mode, token)
    lease = await store.pool.lasting(lease_seconds(ttl), ttl, kept)
    queue_lease = await store.pool.lasting(queue_seconds, queue_seconds / 2)
    record = Record.new(holder, 1, ttl=ttl)
    queued = Record.new(holder, 1, queued=True).encode()
    read_back = {"request_range": {"key": b64(key)}}

    def first(lease: Lease) -> JSON:
        return {
            "compare": [empty(blocking(prefix, mode))],
            "success": [
                put(key, record.encode(), lease.id), fence_here(store.fence_key(kind, name)),
                read_back,
            ],
            "failure": [put(key, queued, queue_lease.id), read_back],
        }

    try:
        answer, lease = await store.pool.on_lease(first, lease)
    except NotFound:
        # The queue lease ended before use (a spare that a break or expiry took): once
        # more on a new one.
        queue_lease = await store.pool.new(queue_seconds)
        answer, lease = await store.pool.on_lease(first, lease)
    (mine,) = kvs(answer["responses"][-1])
    created = int(mine["create_revision"])
    if answer.get("succeeded"):
        store.remember(kind, name, token, Held(key, lease, created, record))
        await store.pool.keep_spare(queue_lease)
        return Grant(created), None
    return Busy(None), QueuePlace(
        kind, name, key, 1, queued, None, created, queue_lease,
        revision(answer) + 1, mode, queue_seconds, holder_lease=lease,
    )
