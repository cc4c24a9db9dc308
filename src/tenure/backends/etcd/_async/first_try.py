"""An etcd acquire's first try, for every kind, and the place a refused one leaves.

- A lock or a semaphore: ONE transaction, which writes the key on a spare (or new) lease. A
  lock writes only if the name has no key at all (a compare on the whole range), so it never
  barges past waiters, and the same transaction puts the name's fence key (a lock's key is
  this client's slot under the name, its fence key on the ``gc_after`` lease:
  ``_first_lock``); a semaphore writes, and reads its key back with the ``limit`` oldest:
  granted if the weights of the keys ahead of it and its own fit the limit
  (``_records.fits``; every weight 1: among the ``limit`` oldest). A granted permit's fence
  is recorded as the name's last by its release (``inspect`` reads a live permit's from its
  key): the first try cannot write it in its own step, as it learns its rank only from that
  step's answer. Refused, a queued permit's key (weighted FIFO: ``spec.queues``) stays as
  its place, at its arrival's creation revision: a second request moves it onto a queue
  lease, marked queued (``_keep_place``); an unqueued one's is deleted. Either way the lease
  it wrote on stays ready in the place, for the grant (``attempt``).
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
import math
from typing import TYPE_CHECKING

from tenure._errors import limit_mismatch
from tenure._types import Grant, Holder, Kind, LeaseSpec
from tenure.backends.etcd._answer import Answer
from tenure.backends.etcd._async.pool import Lease, lease_seconds, whole_seconds
from tenure.backends.etcd._errors import NotFound
from tenure.backends.etcd._keys import Record, b64, entry_name, name_prefix, unb64
from tenure.backends.etcd._records import fits, lease_of
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

__all__ = ["GRANT_UNWRITTEN", "QUEUE_TTL", "SESSION_TRUST", "Held", "QueuePlace", "first_try"]

QUEUE_TTL = 2
"""Seconds a waiter's place in the queue outlives its last wait (etcd's smallest useful
lease: below the server's minimum TTL it is raised anyway)."""
SESSION_TRUST = 2 / 3
"""The part of a queue lease's length, from the send of the grant or keep-alive that last
restarted its clock (``Lease.refreshed``), that a lock's grant at the head of the queue
trusts its key to stay on it while the move onto the holder lease is unanswered
(``attempt``, "Granted at the head"): the server ends the lease no sooner than that length
after it heard the keep-alive, which was after we sent it; the third left over absorbs timer
slack and a client clock running slower than the leader's (as ZooKeeper's ``SESSION_TRUST``)."""
GRANT_UNWRITTEN = 1 / 3
"""The part of a queue lease's length after its last restart within which a lock's waiter,
found at the head of the queue, takes the grant without waiting for the move's answer: the
move then has as long again before the grant is in doubt (``SESSION_TRUST``)."""


@dataclasses.dataclass
class Held:
    """What this process knows of one of its granted keys."""

    key: str
    lease: Lease
    revision: int
    record: Record
    """What the key holds, rewritten whole when an election's value changes."""
    fence_kept_until: float = math.inf
    """A lock's: until when (``time.monotonic``) the name's fence key, put by the grant,
    still lasts ``gc_after`` (``AsyncEtcdBackend.fence_lease``)."""
    granting: Answer | None = None
    """A grant at the head of the queue (``attempt``, "Granted at the head"): the answer of
    the transaction moving the key onto ``lease``, sent without waiting; its value, once
    set, is why the grant is lost (None: the key is on ``lease`` now). Release, renewal,
    ``owned`` and ``set_value`` wait for it first."""
    grant_unanswered_after: float = math.inf
    """Monotonic time past which that transaction, still unanswered, no longer vouches for
    the lease: the key is on its queue lease until it lands, which may lapse then."""


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
    predecessor_created: int | None = None
    """That key's creation revision: a lock key's name is reused (``_slots``), and a key of
    that name written again since is behind us, not the one ahead."""
    predecessor_known: bool = False
    """Whether ``predecessor`` is fresh (None then: nothing ahead); a wait uses it once."""
    woken: bool = True
    """Whether the last wait may have seen the key ahead go (a deletion, an error: anything
    but a quiet timeout). After a quiet one the next step reads before it tries to write."""
    weight: int = 1
    """A semaphore's permit's weight: the units of the limit it takes."""
    predecessor_granted: bool = False
    """A lock's waiter granted at the head (``attempt``): ``predecessor`` is known to have
    held the lock (its record written as a holder's): once it goes, nothing is ahead."""
    at_head: bool = False
    """The last wait saw the last of ``ahead`` deleted: the next step grants, unread."""



async def first_try(
    store: AsyncEtcdBackend, name: str, spec: LeaseSpec, *, token: str, ttl: float,
    holder: Holder, kept: Lease | None,
) -> Grant | QueuePlace:
    """Granted, or refused with the place a wait starts from (``kept``: the holder lease
    a refused try of the same attempt left ready)."""
    kind, limit = str(spec.kind), spec.limit
    prefix = name_prefix(store.settings.namespace, kind, name)
    if spec.mode is not None:
        queue_seconds = QUEUE_TTL if spec.queue_ttl is None else whole_seconds(spec.queue_ttl)
        return await _first_in_turn(
            store, kind, name, token=token, ttl=ttl, holder=holder, mode=spec.mode,
            queue_seconds=queue_seconds, kept=kept, fair=spec.fair,
        )
    if limit == 1:
        return await _first_lock(store, name, spec, token=token, ttl=ttl, holder=holder,
                                 kept=kept)
    key = prefix + token
    weight = spec.weight
    record = Record.new(holder, limit, value=spec.value, ttl=ttl, weight=weight)
    lease = await store.pool.lasting(lease_seconds(ttl), ttl, kept)

    def first(lease: Lease) -> JSON:
        # A queued permit reads its key back too: refused, it stays as its place, at the
        # creation revision of this write (``_keep_place``).
        read_back = [{"request_range": {"key": b64(key), "keys_only": True}}]
        return {"success": [put(key, record.encode(), lease.id),
                            *(read_back if spec.queues else []), oldest(prefix, limit)]}

    answer, lease = await store.pool.on_lease(first, lease)
    ranked = kvs(answer["responses"][-1])
    at = next((i for i, kv in enumerate(ranked) if unb64(kv["key"]).decode() == key), None)
    mine = None if at is None else ranked[at]
    stored = [Record.decode(kv.get("value", "")).limit for kv in ranked if kv is not mine]
    conflict = next((s for s in stored if s != limit), None)
    if mine is not None and conflict is None and fits(limit, [
        Record.decode(kv.get("value", "")).weight for kv in ranked[:at]] + [weight])[-1]:
        created = int(mine["create_revision"])
        if mine.get("lease") != lease.id:  # a retry found the key its lost reply wrote
            await store.pool.keep_spare(lease)
            # That lease's clock restarts now: the holder gets its whole ttl from here.
            lease = Lease(lease_of(mine), lease.seconds, 0.0)
            await store.pool.refresh([lease])
            record = Record.decode(mine.get("value", ""))  # and keeps what it stored
        # A permit's fence is its key's creation revision, which ``inspect`` reads from the
        # key while it lives; its release records it as the name's last fence.
        store.remember(kind, name, token, Held(key, lease, created, record))
        return Grant(created)
    queued = Record.new(holder, limit, queued=True, weight=weight).encode()
    if limit > 1 and spec.queues and conflict is None:
        # A weighted FIFO permit refused: its key, written at its arrival, stays as its
        # place (its creation revision kept), marked queued on a queue lease.
        (written,) = kvs(answer["responses"][1])
        return await _keep_place(store, QueuePlace(
            kind, name, key, limit, queued, spec.value, int(written["create_revision"]),
            None, revision(answer) + 1, None, _queue_seconds(spec), holder_lease=lease,
            weight=weight,
        ))
    # Our key is written, not among the limit oldest: it goes, its lease stays ours.
    await store.gateway.post("/v3/kv/deleterange", {"key": b64(key)})
    if conflict is not None and kind == Kind.SEMAPHORE:
        await store.pool.keep_spare(lease)
        raise limit_mismatch(name, conflict, limit)
    return QueuePlace(kind, name, key, limit, queued, spec.value, holder_lease=lease,
                      weight=weight, queue_seconds=_queue_seconds(spec))


async def _first_lock(
    store: AsyncEtcdBackend, name: str, spec: LeaseSpec, *, token: str, ttl: float,
    holder: Holder, kept: Lease | None,
) -> Grant | QueuePlace:
    """The first try of a lock (or of a semaphore whose limit is 1): its key written on a
    spare (or new) lease only into an empty range, so never past a queued waiter, and the
    name's fence key put, in one transaction. Written, the key is the one this transaction
    created (the range had none), at the answer's revision: nothing to read back. Refused,
    the oldest key tells the holder, or is our own (a retry whose lost reply wrote it).

    A lock's key is this client's slot under the name (``_slots``), and its fence key goes on
    the ``gc_after`` lease, so that its release is one delete of the key (``_release_lock``);
    refused, nothing was written, and the slot is free again until the waiter joins the
    queue. A semaphore's key is named by the token, its fence key on the holder's lease
    (``_statements``)."""
    kind = str(spec.kind)
    prefix = name_prefix(store.settings.namespace, kind, name)
    slot = store.lock_slot(name, token) if kind == Kind.LOCK else None
    key = prefix + token if slot is None else slot.key
    record = Record.new(holder, 1, value=spec.value, ttl=ttl)
    lease = await store.pool.lasting(lease_seconds(ttl), ttl, kept)
    fence_lease: str | None = None
    fence_kept_until = math.inf
    if slot is not None:
        fence_lease, fence_kept_until = await store.fence_lease()

    def first(lease: Lease) -> JSON:
        fence = fence_here(store.fence_key(kind, name),
                           lease.id if slot is None else fence_lease or "0")
        return {
            "compare": [empty(prefix)],
            "success": [put(key, record.encode(), lease.id), fence],
            "failure": [oldest(prefix, 1)],
        }

    try:
        answer, lease = await store.pool.on_lease(first, lease, track=slot)
    except NotFound:
        if slot is None:
            raise
        # The gc_after lease ended before use (a process stalled past it): a new one.
        store.drop_fence_lease()
        fence_lease, fence_kept_until = await store.fence_lease()
        answer, lease = await store.pool.on_lease(first, lease, track=slot)
    if answer.get("succeeded"):
        created = revision(answer)
        store.remember(kind, name, token, Held(key, lease, created, record, fence_kept_until))
        return Grant(created)
    oldest_key = kvs(answer["responses"][0])
    mine = oldest_key[0] if oldest_key else None
    if mine is not None and unb64(mine["key"]).decode() == key:
        # A retry found the key its lost reply wrote (none other is under its name).
        created = int(mine["create_revision"])
        if mine.get("lease") != lease.id:
            await store.pool.keep_spare(lease)
            # That lease's clock restarts now: the holder gets its whole ttl from here.
            lease = Lease(lease_of(mine), lease.seconds, 0.0)
            await store.pool.refresh([lease])
            record = Record.decode(mine.get("value", ""))  # and keeps what it stored
        store.remember(kind, name, token, Held(key, lease, created, record, fence_kept_until))
        return Grant(created)
    if slot is not None:
        store.slots.free(kind, name, token)
    if kind == Kind.SEMAPHORE and mine is not None:
        stored = Record.decode(mine.get("value", "")).limit
        if stored != 1:
            await store.pool.keep_spare(lease)
            raise limit_mismatch(name, stored, 1)
    queued = Record.new(holder, 1, queued=True).encode()
    return QueuePlace(kind, name, key, 1, queued, spec.value, holder_lease=lease,
                      queue_seconds=_queue_seconds(spec))


def _queue_seconds(spec: LeaseSpec) -> int:
    """The length of a place's queue lease: ``queue_ttl`` rounded up to whole seconds."""
    return QUEUE_TTL if spec.queue_ttl is None else whole_seconds(spec.queue_ttl)


async def _keep_place(store: AsyncEtcdBackend, place: QueuePlace) -> QueuePlace:
    """A refused permit's key becomes its ``place``: it moves onto a queue lease, marked
    queued, if it is still the key written (its creation revision), so that it keeps the
    place of its arrival; the holder lease stays ready for the grant. A key gone meanwhile
    (a break of its lease) leaves a place to join again at the back."""
    queue_lease = await store.pool.lasting(place.queue_seconds, place.queue_seconds / 2)

    def keep(queue_lease: Lease) -> JSON:
        return {"compare": [created_at(place.key, place.revision)],
                "success": [put(place.key, place.record, queue_lease.id)]}

    kept, queue_lease = await store.pool.on_lease(keep, queue_lease)
    if kept.get("succeeded"):
        place.lease = queue_lease
    else:
        place.revision = 0
        await store.pool.keep_spare(queue_lease)
    return place


async def _first_in_turn(
    store: AsyncEtcdBackend, kind: str, name: str, *, token: str, ttl: float, holder: Holder,
    mode: str, queue_seconds: int, kept: Lease | None, fair: bool,
) -> Grant | QueuePlace:
    """A read-write lock's first try: granted, or queued, in one transaction."""
    held = store.granted(kind, name, token)
    if held is not None and await store.pool.keep_alive(held.lease):
        return Grant(held.revision)  # a retry of a grant whose answer was lost
    prefix = name_prefix(store.settings.namespace, kind, name)
    key = prefix + entry_name(mode, token)
    lease = await store.pool.lasting(lease_seconds(ttl), ttl, kept)
    queue_lease = await store.pool.lasting(queue_seconds, queue_seconds / 2)
    record = Record.new(holder, 1, ttl=ttl, fair=fair)
    queued = Record.new(holder, 1, queued=True, fair=fair).encode()
    read_back = {"request_range": {"key": b64(key)}}

    def first(lease: Lease) -> JSON:
        return {
            "compare": [empty(blocking(prefix, mode))],
            "success": [
                put(key, record.encode(), lease.id),
                fence_here(store.fence_key(kind, name), lease.id),
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
        return Grant(created)
    return QueuePlace(
        kind, name, key, 1, queued, None, created, queue_lease,
        revision(answer) + 1, mode, queue_seconds, holder_lease=lease,
    )
