"""etcd for asyncio: locks, semaphores and read-write locks as ordered keys, one mechanism.

A lock is the case ``limit = 1`` of the same queue a semaphore uses: every holder and waiter
of a name writes a key of its own (``_keys``), the ``limit`` oldest keys by creation revision
hold the name, and a waiter watches for a deletion ahead of it. The rooms: this module (the
store's verbs and an acquire's first try), ``attempt`` (waiting: a place in the queue, the
grant from it), ``pool`` (leases and spares), ``gateway`` (the only code that speaks HTTP),
``_statements`` (the requests, and the last fence), ``_records`` (keys -> ``LockInfo``). The
steps, with the requests each sends (``bench/consensus_bench.py`` counts them):

- **Acquire, first try**: ONE transaction, which writes the key on a spare (or new) lease.
  A lock writes only if the name has no key at all (a compare on the whole range), so it
  never barges past waiters, and the same transaction puts the name's fence key; a
  semaphore writes, and its key is granted if the weights of the keys ahead of it and its
  own fit the limit (weighted FIFO permits: ``_records.fits``), else it stays as the
  waiter's place, moved onto a queue lease (its release records its fence:
  ``first_try``). Refused, the attempt keeps the lease it wrote on for its grant, and waits
  (``attempt``).
- **Release**: a lock's is one delete of its key by name (watchers wake): the name is this
  client's slot, under which nothing else can be (``_slots``), and the grant put the name's
  fence key on the ``gc_after`` lease already (``_release_lock``). A slot in doubt, or a
  hold longer than that lease's margin, sends one transaction instead: the delete under a
  compare that the key is still the one granted, and a put of its fence (no later fence can
  be recorded while it holds). Any other kind's is one transaction that deletes the holder
  key (named by its token) and moves the name's fence key, if it records this holder's
  fence, onto the ``gc_after`` lease (``_statements``: a released name's record goes
  ``gc_after`` later). The lease, alive and now without a key, becomes a spare. A key
  already gone (its lease ended: expiry, a break) answers ``deleted: 0`` (or the compare
  fails): not released, and the lease is dropped. Inside a lock's ``hold_at_least`` window
  the key is not deleted: it moves to a lease of the window's length (``_move``, as a
  renewal with a new ttl does), keeping its creation revision (the fence), and is deleted
  with that lease when it runs out (its slot is never used again).
- **Renewal**: a batch of leases kept alive in one request; a lease that expired or was
  revoked (by a break) answers TTL 0: lost.
- **Election values** (``set_value``): the leader's value is a field of the holder key's
  record, written by the transaction that grants the key, replaced by a transaction that
  compares the key's creation revision (only the live holder's key, never a later one), and
  deleted with the key (release, expiry, break). A waiter's key is marked ``queued`` and
  carries no value: it is nobody's leadership until the transaction that grants it.
  ``inspect`` takes holder, value and term (the key's creation revision) from that one key.

Fence: the holder key's creation revision; the name's last one is kept for ``inspect`` after
release (``_statements``).

**Read-write and fair locks** (kind ``rwlock``, ``tenure.backends._ordered_queue`` for the rule
and the fence argument): the same keys, with the mode in the key's name (``_keys``), so that
a name's write keys are one key range. The first try takes two leases (spares or new: the
holder's, and the place's ``queue_ttl`` rounded up to whole seconds) and sends ONE
transaction: if no key at all (a writer) or no write key (a reader) exists under the name, it
writes the key on the holder lease and puts the fence key: granted; otherwise it writes the
key marked ``queued`` on the queue lease: a place at the back of the queue, in the same step.
The lease the transaction did not use stays a spare (the queue lease) or is kept for the
grant (the holder lease). Release, renewal, break as for locks; a waiter that gives up
revokes its queue lease, which deletes its place. ``inspect`` reports every key not marked
queued as a lease with its mode, and counts the queued ones.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import math
import time
from collections.abc import Callable, Sequence
from typing import Any

from tenure._async.store import WITH_WEIGHTS, AsyncStore, extend_by_kind
from tenure._concurrency import async_io as io
from tenure._concurrency.listeners import Listeners
from tenure._types import (
    Busy,
    Capabilities,
    Grant,
    Holder,
    Kind,
    LeaseSpec,
    LockInfo,
    Mode,
    Renewal,
)
from tenure.backends.etcd import SCHEMES
from tenure.backends.etcd._async.attempt import AsyncEtcdAttempt
from tenure.backends.etcd._async.first_try import QUEUE_TTL, Held, QueuePlace, first_try
from tenure.backends.etcd._async.gateway import AsyncGateway, NotFound
from tenure.backends.etcd._async.pool import (
    SPARE_LEASES,
    AsyncLeasePool,
    Lease,
    lease_seconds,
)
from tenure.backends.etcd._config import EtcdSettings, parse
from tenure.backends.etcd._errors import DRIVER_ERRORS
from tenure.backends.etcd._keys import (
    Record,
    b64,
    entry_name,
    kind_prefix,
    list_prefix,
    name_prefix,
    prefix_end,
    split_key,
    unb64,
)
from tenure.backends.etcd._records import fence_of, holding, lease_of, lock_info
from tenure.backends.etcd._slots import Slot, Slots
from tenure.backends.etcd._statements import (
    JSON,
    created_at,
    fence_at,
    fence_released,
    kvs,
    oldest,
    put,
)

__all__ = ["QUEUE_TTL", "SPARE_LEASES", "AsyncEtcdBackend", "gc_reuse", "lease_seconds"]


def gc_reuse(gc_after: float) -> float:
    """Seconds one ``gc_after`` lease takes released names' fence keys: a tenth of
    ``gc_after``, within 1 s to 60 s (one lease grant per minute at most under the
    default)."""
    return min(60.0, max(1.0, gc_after / 10))


class AsyncEtcdBackend(AsyncStore):
    """Options: ``namespace`` (the first segment of every key, default ``tenure``),
    ``timeout`` (seconds for each request, across members, default 5); for ``etcds://``,
    ``ssl_ca``, ``ssl_cert``, ``ssl_key``. Credentials in the URL use etcd's auth."""
    attempt_class = AsyncEtcdAttempt

    schemes = SCHEMES
    capabilities = Capabilities(
        fencing="strictly increasing per name: the holder key's creation revision (the "
        "cluster's revision), across releases, restarts and leader changes; readers (or permits) "
        "granted together by one release may get theirs in any order among themselves, a "
        "write's is above every earlier one",
        fences_survive_restart=True,
        leases_survive_restart=True,
        wakeups="notification (a watch on the key ahead)",
        multi_host=True,
        fault_tolerant=True,
        lease_overrun=1.5,
        fences_count_per_name=False,
    )
    offers = WITH_WEIGHTS
    driver_errors = DRIVER_ERRORS
    notifies = True
    max_backoff = 0.5
    """The longest single wait: each wait keeps the waiter's queue lease alive first."""

    def __init__(self, settings: EtcdSettings) -> None:
        self.settings = settings
        self.gateway = AsyncGateway(settings)
        self.pool = AsyncLeasePool(self.gateway)
        self._held: dict[tuple[str, str, str], Held] = {}
        self.slots = Slots()
        """The names of this client's lock keys (``_slots``), shared with the renewal twin."""
        self._doubt_listeners = Listeners()
        """Told when a grant at the head of the queue turns out lost (shared with the
        renewal twin, as ``_held``)."""
        self._gc_lease: tuple[str, float] | None = None
        """The lease released names' fence keys go onto now, and when it was granted
        (``time.monotonic``): shared by the releases of ``GC_LEASE_REUSE`` seconds."""

    @classmethod
    def from_url(cls, url: str, **options: Any) -> AsyncEtcdBackend:
        return cls(parse(url, options))

    def describe(self) -> str:
        return self.settings.display

    def renewal_store(self) -> AsyncEtcdBackend:
        """An instance with a gateway of its own (httpx's asyncio clients belong to the loop
        that opened them) and this one's record of granted keys, shared: a renewal finds
        the lease of a key by it, and moves the key to a new lease in it (``_move``). etcd
        leases belong to no connection: any client may keep one alive."""
        twin = copy.copy(self)
        twin.gateway = AsyncGateway(self.settings)
        # Spare leases of its own: the twin runs on the renewal thread, and a pool shared
        # across threads could hand one spare to two acquisitions. Its close revokes its own.
        twin.pool = AsyncLeasePool(twin.gateway)
        return twin

    async def aclose(self) -> None:
        await self.pool.aclose()
        await self.gateway.aclose()

    # ---- acquire: the first try, for every kind --------------------------------------------

    def fence_key(self, kind: str, name: str) -> str:
        return name_prefix(self.settings.namespace, f"{kind}.fence", name)

    def remember(self, kind: str, name: str, token: str, held: Held) -> None:
        """A grant: its key, lease and record, for release, renewal and set_value."""
        self._held[(kind, name, token)] = held

    def granted(self, kind: str, name: str, token: str) -> Held | None:
        return self._held.get((kind, name, token))

    # ---- a lock's grant at the head of the queue, moved after (``attempt``) -------------

    def move_soon(
        self, name: str, held: Held, queue_lease: Lease, fence_lease: str | None,
        slot: Slot | None,
    ) -> None:
        """Send, without waiting, the transaction that moves ``held``'s key (granted at the
        head of the queue, still on ``queue_lease``) onto ``held.lease``, if it is still the
        key we queued (its creation revision), and records its fence; its outcome goes to
        ``held.granting``: None, or why the grant is lost (the doubt listeners hear of it)."""
        answer = held.granting
        assert answer is not None
        fence_key = self.fence_key(Kind.LOCK, name)

        def move(lease: Lease) -> JSON:
            return {
                "compare": [created_at(held.key, held.revision)],
                "success": [
                    put(held.key, held.record.encode(), lease.id),
                    fence_at(fence_key, held.revision,
                             lease.id if slot is None else fence_lease),
                ],
            }

        async def send() -> None:
            nonlocal fence_lease
            lost: str | None = None
            try:
                try:
                    moved, held.lease = await self.pool.on_lease(move, held.lease, track=slot)
                except NotFound:
                    if slot is None:
                        raise
                    self.drop_fence_lease()  # the gc_after lease ended before use
                    fence_lease, held.fence_kept_until = await self.fence_lease()
                    moved, held.lease = await self.pool.on_lease(move, held.lease, track=slot)
                if not moved.get("succeeded"):
                    lost = ("its key, granted at the head of the queue, was gone before the "
                            "transaction moving it onto the holder's lease landed (its queue "
                            "lease lapsed, or a break)")
            except Exception as exc:  # any failure: the grant is in doubt
                lost = ("the transaction moving its key, granted at the head of the queue, "
                        f"onto the holder's lease failed: {exc!r}")
            answer.set(lost)
            if lost is not None:
                self._doubt_listeners.call_all()
                return
            with contextlib.suppress(Exception):  # a spare: it lapses on its own anyway
                await self.pool.keep_spare(queue_lease)  # the key left it

        io.start_background(send, "tenure-etcd-grant-at-head")

    async def _grant_stands(self, held: Held) -> bool:
        """Wait for the move of a grant at the head of the queue (if any): whether the key
        is on the holder's lease now (False: lost, or no answer within the deadline)."""
        answer = held.granting
        if answer is None:
            return True
        if not answer.ready():
            try:
                await io.result_of(answer, 2 * self.settings.timeout)
            except TimeoutError:
                return False
        return answer.get(block=False) is None

    def lease_doubt(self, kind: Kind, name: str, token: str) -> str | None:
        held = self._held.get((kind, name, token))
        answer = None if held is None else held.granting
        if held is None or answer is None:
            return None
        if not answer.ready():
            if time.monotonic() < held.grant_unanswered_after:
                return None
            return ("the transaction moving its key, granted at the head of the queue, onto "
                    "the holder's lease is still unanswered: the queue lease it is on may "
                    "have lapsed by the server's clock")
        lost: str | None = answer.get(block=False)
        return lost

    def add_doubt_listener(self, listener: Callable[[], object]) -> None:
        """``listener`` is called (from any thread) when a grant at the head turns out lost;
        a bound method is held weakly."""
        self._doubt_listeners.add(listener)

    async def acquire(
        self, name: str, spec: LeaseSpec, token: str, ttl: float, holder: Holder
    ) -> Grant | Busy:
        outcome = await first_try(
            self, name, spec, token=token, ttl=ttl, holder=holder, kept=None
        )
        return Busy(None) if isinstance(outcome, QueuePlace) else outcome

    async def _gc_lease_id(self) -> str | None:
        """The lease a released name's fence key goes onto: it lasts at least ``gc_after``
        from now (whole seconds, rounded up), one shared by this client's releases of
        ``gc_reuse`` seconds (a key goes between ``gc_after`` and ``gc_after`` + reuse after
        its release); nothing keeps it alive. None: ``gc_after`` is None, kept for ever."""
        gc_after = self.settings.gc_after
        if gc_after is None:
            return None
        reuse = gc_reuse(gc_after)
        now = time.monotonic()
        if self._gc_lease is None or now - self._gc_lease[1] > reuse:
            lease = await self.pool.new(math.ceil(gc_after + reuse))
            self._gc_lease = (lease.id, lease.refreshed)
        return self._gc_lease[0]

    async def fence_lease(self) -> tuple[str | None, float]:
        """The lease a lock's grant puts the name's fence key on: the ``gc_after`` lease
        (None: none, kept for ever), and until when (``time.monotonic``) a release may leave
        the key there, as it then still lasts ``gc_after`` past the release; after that the
        release writes it again (``_release_lock``)."""
        lease = await self._gc_lease_id()
        gc_after, granted = self.settings.gc_after, self._gc_lease
        if lease is None or gc_after is None or granted is None:
            return None, math.inf
        return lease, granted[1] + math.ceil(gc_after + gc_reuse(gc_after)) - gc_after

    def drop_fence_lease(self) -> None:
        """The ``gc_after`` lease was not found (it ended: a process stalled past it)."""
        self._gc_lease = None

    def lock_slot(self, name: str, token: str) -> Slot:
        """The slot (``_slots``) of ``token``'s acquisition of the lock ``name``."""
        return self.slots.claim(Kind.LOCK, name, token,
                                name_prefix(self.settings.namespace, Kind.LOCK, name))

    def _release_txn(self, kind: str, name: str, held: Held, gc_lease: str | None) -> JSON:
        """The transaction that deletes the holder key and leaves the name's fence key on
        the ``gc_after`` lease, if it records this holder's fence.

        A lock's is flat: if the key is still the one granted (its creation revision), it
        is deleted and the fence key is put with this holder's fence. While a lock's key
        lives no other key of the name is granted (a grant needs an empty range, or the
        oldest key's place), so the last fence granted is this holder's: the put never
        moves it back. A semaphore's or a read-write lock's holders overlap, so theirs
        moves the fence key only if it records this holder's fence (``fence_released``); a
        permit's also records its fence if none as late is recorded (its first try left
        that to the release)."""
        delete = {"request_delete_range": {"key": b64(held.key)}}
        fence_key = self.fence_key(kind, name)
        if kind == Kind.LOCK:
            written: JSON = {"key": b64(fence_key), "value": b64(f"{held.revision:020d}")}
            if gc_lease is not None:
                written["lease"] = gc_lease
            return {"compare": [created_at(held.key, held.revision)],
                    "success": [delete, {"request_put": written}]}
        return {"success": [delete, fence_released(
            fence_key, held.revision, gc_lease, record=kind == Kind.SEMAPHORE,
        )]}

    async def _delete_held(
        self, kind: str, name: str, held: Held, track: Slot | None = None
    ) -> int:
        """Delete the holder key and leave the name's fence key on the ``gc_after`` lease
        (``_release_txn``), in one transaction: how many keys it deleted."""
        for _ in range(2):
            gc_lease = await self._gc_lease_id()
            try:
                answer = await self.gateway.post(
                    "/v3/kv/txn", self._release_txn(kind, name, held, gc_lease), track=track
                )
            except NotFound:
                self._gc_lease = None  # ended before use (a process stalled past it)
                continue
            if not answer.get("succeeded"):
                return 0  # a lock's key gone with its lease (expiry, a break)
            return int(answer["responses"][0]["response_delete_range"].get("deleted", 0))
        return int((await self.gateway.post(
            "/v3/kv/txn", {"compare": [created_at(held.key, held.revision)],
                           "success": [{"request_delete_range": {"key": b64(held.key)}}]},
            track=track,
        )).get("succeeded", False))

    async def _release_lock(self, name: str, token: str, held: Held) -> int:
        """A lock's release: one delete of its key by name, when nothing else can be under
        that name (a clean slot: ``_slots``) and the name's fence key, put on the
        ``gc_after`` lease by the grant, still lasts ``gc_after`` from now; else the guarded
        transaction that also writes the fence key again (``_delete_held``). The slot is
        free for the next acquisition once the answer came."""
        slot = self.slots.get(Kind.LOCK, name, token)
        if slot is not None and slot.clean and time.monotonic() < held.fence_kept_until:
            answer = await self.gateway.post(
                "/v3/kv/deleterange", {"key": b64(held.key)}, track=slot
            )
            deleted = int(answer.get("deleted", 0))
        else:
            deleted = await self._delete_held(Kind.LOCK, name, held, slot)
        self.slots.free(Kind.LOCK, name, token)
        return deleted

    async def watch_name(self, kind: str, name: str, timeout: float) -> None:
        """Return at the next deletion under ``name`` (a release, expiry or break), or after
        ``timeout`` seconds: a wait without a place in the queue."""
        prefix = name_prefix(self.settings.namespace, kind, name)
        await self.gateway.watch_deletes(b64(prefix), b64(prefix_end(prefix)), 0, timeout)

    # ---- the other verbs -------------------------------------------------------------------

    async def release(self, kind: Kind, name: str, token: str) -> bool:
        held = self._held.pop((kind, name, token), None)
        if held is not None and not await self._grant_stands(held):
            # A grant at the head whose move found the key gone (or failed: it may have
            # landed, so the key goes, guarded by its creation revision).
            await self._delete_held(kind, name, held, self.slots.get(kind, name, token))
            self.slots.free(kind, name, token)
            return False
        if held is not None:
            deleted = await (self._release_lock(name, token, held) if kind == Kind.LOCK
                             else self._delete_held(kind, name, held))
            if deleted == 0:
                return False  # gone with its lease (expiry, a break): the lease is dropped
            await self.pool.keep_spare(held.lease)  # alive until this delete, and now keyless
            return True
        # An undo, or a waiter leaving its place: whatever key this token wrote goes with its
        # lease; only a key that held the name counts as released.
        kv = await self._entry_of(kind, name, token)
        revoked = kv is not None and await self.pool.revoke(lease_of(kv))
        if kind == Kind.LOCK:
            self.slots.free(kind, name, token)  # its key gone, or never written
        return revoked and kv is not None and not Record.decode(kv.get("value", "")).queued

    async def extend_many(self, renewals: Sequence[Renewal]) -> list[bool]:
        return await extend_by_kind(renewals, self._extend_kind)

    async def release_after(self, kind: Kind, name: str, token: str, seconds: float) -> bool:
        # The key moves to a lease of the window's length (whole seconds, rounded up: never
        # short), which nothing keeps alive; this process forgets it (it is no spare).
        kept = await super().release_after(kind, name, token, seconds)
        self._held.pop((kind, name, token), None)
        if kind == Kind.LOCK:
            self.slots.retire(kind, name, token)  # its key lives on, on the window's lease
        return kept

    async def _extend_kind(self, kind: Kind, renewals: Sequence[Renewal]) -> list[bool]:
        results: dict[int, bool] = {}
        batch: list[tuple[int, Lease]] = []
        for index, renewal in enumerate(renewals):
            held = self._held.get((kind, renewal.name, renewal.token))
            if held is None or not await self._grant_stands(held):
                results[index] = False
            elif lease_seconds(renewal.ttl) == held.lease.seconds:
                batch.append((index, held.lease))
            else:
                results[index] = await self._move(renewal, held)
        if batch:
            alive = await self.pool.refresh([lease for _, lease in batch])
            results.update((index, ok) for (index, _), ok in zip(batch, alive, strict=True))
        return [results[index] for index in range(len(renewals))]

    async def _move(self, renewal: Renewal, held: Held) -> bool:
        """A new ttl: the key moves to a new lease of that many seconds, if it is still ours."""
        lease = await self.pool.new(lease_seconds(renewal.ttl))
        # The record is rewritten whole (it is the one stored: the grant and every election
        # value wrote it), with the new ttl for ``inspect``.
        record = dataclasses.replace(held.record, ttl=renewal.ttl)
        # The name's fence key, on the old lease if it records this holder's fence, moves
        # along (revoking the old lease would delete it); a lock's is on the gc_after lease.
        fence_key = self.fence_key(renewal.kind, renewal.name)
        moves = [put(held.key, record.encode(), lease.id)]
        if renewal.kind != Kind.LOCK:
            moves.append(fence_released(fence_key, held.revision, lease.id))
        moved = await self.gateway.post("/v3/kv/txn", {
            "compare": [created_at(held.key, held.revision)], "success": moves,
        })
        if not moved.get("succeeded") or not await self.pool.keep_alive(held.lease):
            await self.pool.revoke(lease.id)
            return False
        await self.pool.revoke(held.lease.id)
        held.lease, held.record = lease, record
        return True

    async def owned(self, kind: Kind, name: str, token: str) -> bool:
        held = self._held.get((kind, name, token))
        if held is None or not await self._grant_stands(held):
            return False
        found = kvs(await self.gateway.post("/v3/kv/range", {"key": b64(held.key)}))
        return bool(found) and int(found[0]["create_revision"]) == held.revision

    async def set_value(self, name: str, token: str, value: str) -> bool:
        held = self._held.get((Kind.LOCK, name, token))
        if held is None or not await self._grant_stands(held):
            return False
        record = dataclasses.replace(held.record, value=value)
        # The creation revision is the term: the put lands only on the key this lease was
        # granted, still alive (etcd deletes it with its lease), and keeps it on that lease.
        answer = await self.gateway.post("/v3/kv/txn", {
            "compare": [created_at(held.key, held.revision)],
            "success": [{"request_put": {
                "key": b64(held.key), "value": record.encode(), "ignore_lease": True,
            }}],
        })
        if not answer.get("succeeded"):
            return False
        held.record = record
        return True

    async def inspect(self, kind: Kind, name: str) -> LockInfo | None:
        prefix = name_prefix(self.settings.namespace, kind, name)
        answer = await self.gateway.post("/v3/kv/txn", {"success": [
            oldest(prefix, None), {"request_range": {"key": b64(self.fence_key(kind, name))}},
        ]})
        keys, fence = (kvs(response) for response in answer["responses"])
        if not fence and not keys:
            return None
        return await self._info(kind, name, keys, fence_of(fence[0]) if fence else 0)

    async def list_records(self, kind: Kind, prefix: str) -> list[LockInfo]:
        namespace = self.settings.namespace
        fences_of = f"{kind}.fence"
        answer = await self.gateway.post("/v3/kv/txn", {"success": [
            {"request_range": {
                "key": b64(list_prefix(namespace, kind, prefix)),
                "range_end": b64(prefix_end(kind_prefix(namespace, kind))),
                "sort_order": "ASCEND", "sort_target": "CREATE",
            }},
            {"request_range": {
                "key": b64(list_prefix(namespace, fences_of, prefix)),
                "range_end": b64(prefix_end(kind_prefix(namespace, fences_of))),
            }},
        ]})
        keys, fences = (kvs(response) for response in answer["responses"])
        by_name: dict[str, list[JSON]] = {}
        for kv in keys:
            key_name = split_key(namespace, kind, unb64(kv["key"]).decode())[0]
            if key_name.startswith(prefix):
                by_name.setdefault(key_name, []).append(kv)
        # A name with a fence key; a semaphore's with keys too (a permit's fence is
        # recorded at its release).
        last: dict[str, int] = dict.fromkeys(by_name if kind == Kind.SEMAPHORE else (), 0)
        for kv in fences:
            fence_name = split_key(namespace, fences_of, unb64(kv["key"]).decode())[0]
            if fence_name.startswith(prefix):
                last[fence_name] = fence_of(kv)
        found = [await self._info(kind, name, by_name.get(name, []), fence)
                 for name, fence in last.items()]
        return sorted(found, key=lambda info: info.name)

    async def _info(self, kind: str, name: str, keys: list[JSON], fence: int) -> LockInfo:
        """The record of ``name`` from its keys: each holding key's lease time left read."""
        left = {}
        for kv, _ in holding(kind, keys):
            left[lease_of(kv)] = await self.pool.time_to_live(lease_of(kv))
        return lock_info(kind, name, keys, fence, left)

    async def break_leases(self, kind: Kind, name: str) -> bool:
        prefix = name_prefix(self.settings.namespace, kind, name)
        keys = kvs(await self.gateway.post("/v3/kv/range", oldest(prefix, None)["request_range"]))
        broken = False
        # Every holder (a waiter about to be granted holds nothing yet: not ours to break).
        holders = holding(kind, keys)
        for kv, _ in holders:
            broken = await self.pool.revoke(lease_of(kv)) or broken
        if kind == Kind.LOCK and not holders and keys:
            # A lock's oldest key still marked queued may hold the name already (granted at
            # the head, its move not landed: ``attempt``): its queue lease goes too, and its
            # move then finds the key gone (a waiter not granted yet joins again behind).
            broken = await self.pool.revoke(lease_of(keys[0])) or broken
        return broken

    async def _entry_of(self, kind: str, name: str, token: str) -> JSON | None:
        """The key ``token`` wrote under ``name`` (either mode's, for a read-write lock)."""
        prefix = name_prefix(self.settings.namespace, kind, name)
        if kind == Kind.LOCK:
            slot = self.slots.get(kind, name, token)
            if slot is None:
                return None  # never written, or its slot freed: nothing left of it
            found = kvs(await self.gateway.post("/v3/kv/range", {"key": b64(slot.key)}))
            return found[0] if found else None
        if kind != Kind.RWLOCK:
            found = kvs(await self.gateway.post("/v3/kv/range", {"key": b64(prefix + token)}))
            return found[0] if found else None
        answer = await self.gateway.post("/v3/kv/txn", {"success": [
            {"request_range": {"key": b64(prefix + entry_name(mode, token))}} for mode in Mode
        ]})
        found = [kv for response in answer["responses"] for kv in kvs(response)]
        return found[0] if found else None
