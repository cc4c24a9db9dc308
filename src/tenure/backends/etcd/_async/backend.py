"""etcd for asyncio: locks and semaphores as ordered keys, one mechanism for both.

A lock is the case ``limit = 1`` of the same queue a semaphore uses: every holder and waiter
of a name writes a key of its own (``_keys``), the ``limit`` oldest keys by creation revision
hold the name, and a waiter watches for a deletion ahead of it. The steps, with the requests
each sends (the benchmark, ``bench/consensus_bench.py``, counts them):

- **Leases**: a holder's key is on a lease of its own, ``lease_seconds(ttl)`` long: the
  smallest whole number of seconds (etcd's unit) above the ttl, so at most a second above
  (``lease_overrun``; the client's own deadline uses the exact ttl, so ``check()`` errs
  early, never late). Above and not equal, so that a lease can be granted ahead: a released
  holder's lease (its key deleted, the lease alive) is kept as a spare for this process's
  next acquisition of the same length, up to ``SPARE_LEASES`` per length, revoked on close
  and never used by a forked child. The server ends a lease no sooner than ``seconds`` after
  the grant or keep-alive that last restarted its clock (``_Lease.refreshed``, stamped
  before it was sent), so a spare is written on only while that leaves the whole ttl from
  now (a spare released less than a second ago, for a whole-second ttl), else it is kept
  alive first (one request, as a grant would cost). Why not one session lease for every
  hold, as etcd's lock service does: a holder that stops renewing must lose the name after
  its ttl, which a lease kept alive for the others would not do.
- **Acquire, first try**: ONE transaction, which writes the key on a spare (or new) lease.
  A lock writes only if the name has no key at all (a compare on the whole range), so it
  never barges past waiters, and the same transaction puts the name's fence key (below); a
  semaphore writes, and its key is granted if it is among the ``limit`` oldest, else
  deleted (and its fence key written by a second request).
- **Waiting**: the waiter writes its key on a short queue lease (``QUEUE_TTL``), in a
  transaction that also reads the key just ahead, and watches that key (a lock), or the
  name's range (a semaphore), for a deletion. Each later wait first keeps alive, in one
  request, the queue lease and the lease the waiter will hold the name on (granted by its
  first try, so that the grant needs no lease request). A waiter that dies or gives up
  leaves the queue within ``QUEUE_TTL`` seconds: its place is on the queue lease, not on a
  lease of its ttl, so a dead waiter at the head holds the name back for seconds, not for a
  whole ttl. Every wait is bounded and followed by a fresh step (watch streams can miss or
  repeat events: etcd issues #20655, #18879).
- **Granted from the queue**: a lock's waiter (and a writer of a read-write lock) sends ONE
  transaction: if its key is still the one it queued (same creation revision) and no key
  in the name's range is older, it moves the key onto its holder lease (its value now the
  holder record) and records the fence; else it reads its key and the key just ahead, for
  the next wait. That is after a wait that may have seen the key ahead go (a deletion, an
  error); after a quiet timeout the waiter reads first (every wait is followed by a fresh
  look), as a transaction with writes is a Raft entry even when its compare refuses it, and
  a read is not. A semaphore's waiter (and a reader) reads its rank first, then sends the
  same move, guarded by the key's creation revision alone. The queue lease, now without a
  key, becomes a spare.
- **Release**: one request deletes the holder key (watchers wake); its lease, alive and now
  without a key, becomes a spare. A key already gone (its lease ended: expiry, a break)
  answers ``deleted: 0``: not released, and the lease is dropped.
- **Renewal**: a batch of leases kept alive in one request; a lease that expired or was
  revoked (by a break) answers TTL 0: lost.
- **Election values** (``AsyncStore.set_value``): the leader's value is a field of the
  holder key's record, written by the transaction that grants the key, replaced by a
  transaction that compares the key's creation revision (only the live holder's key, never a
  later one), and deleted with the key (release, expiry, break). A waiter's key is marked
  ``queued`` and carries no value: it is nobody's leadership until the transaction that
  grants it. ``inspect`` takes holder, value and term (the key's creation revision) from
  that one key, read in one transaction.

Fence: the holder key's creation revision. A ``{kind}.fence`` key per name remembers the last
fence granted, for ``inspect`` after release, written by the granting transaction itself:

- a first try that writes into a range with no key that blocks it puts the fence key with
  an empty value: its mod revision, the transaction's revision, is the holder key's creation
  revision, and it is above every fence granted before (each was granted at a lower
  revision), so a plain put never moves the last fence back;
- a grant from the queue (or a semaphore's first try, whose rank is read after its write)
  writes the fence as the value, zero-padded so that etcd's byte-wise compare orders it as a
  number, only if it is above the last fence recorded: a nested transaction compares the
  fence key's mod revision (an empty value's fence, and never below a written value's) and,
  when that is not below, the value (readers granted together take theirs in any order).

The last fence is the value when there is one, else the mod revision (``_fence_of``); a
value written by an earlier release of tenure reads the same way.

**Read-write and fair locks** (kind ``rwlock``, ``tenure._async.ordered_queue`` for the rule
and the fence argument): the same keys, with the mode in the key's name (``_keys``), so that
a name's write keys are one key range.

- **Acquire, first try**: two leases (spares or new: the holder's, and the place's
  ``queue_ttl`` rounded up to whole seconds) and ONE transaction: if no key at all (a
  writer) or no write key (a reader) exists under the name, it writes the key on the holder
  lease and puts the fence key: granted, fence = its creation revision; otherwise it writes
  the key marked ``queued`` on the queue lease: a place at the back of the queue, in the
  same step. The lease the transaction did not use stays a spare (the queue lease) or is
  kept for the grant (the holder lease).
- **Waiting**: each wait keeps the queue and holder leases alive, then watches for the
  deletion of the newest key ahead that blocks this one: any key for a writer, the newest
  write key for a reader. A place whose lease lapsed (a waiter stalled past ``queue_ttl``)
  is gone for good: its waiter writes its key again, at the back, with a new creation
  revision.
- **Granted from the queue**: a writer as a lock's waiter (one transaction whose compare
  covers the name's whole range, its own key included); a reader with one read that counts
  the write keys created before its own (none left: its turn), then the move onto its
  holder lease, guarded by its key's creation revision; its fence is that creation revision.
- **Release, renewal, break** as for locks; a waiter that gives up revokes its queue lease,
  which deletes its place. ``inspect`` reports every key not marked queued as a lease with
  its mode, and counts the queued ones.

Why a grant from the queue may read, then write, where the first try may not: the keys that
block a waiter are all older than its own, and no key older than it can appear any more (a
new key gets a higher revision), so once none is left, none comes back; the move only has to
find our own key still there, created at the same revision. A reader cannot put the rule in
its compare, as a writer does: a compare on an empty range compares a missing key, whose
creation revision 0 is below every revision.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import math
import os
import time
from collections.abc import Callable, Sequence
from typing import Any

from tenure._async.capabilities import MODES, WRITE
from tenure._async.ordered_queue import AsyncOrderedQueueStore
from tenure._errors import TenureError, limit_mismatch
from tenure._types import Busy, Capabilities, Grant, Holder, Kind, LeaseInfo, LockInfo, Renewal
from tenure.backends.etcd import SCHEMES
from tenure.backends.etcd._async.gateway import JSON, AsyncGateway, NotFound
from tenure.backends.etcd._config import EtcdSettings, parse
from tenure.backends.etcd._keys import (
    Record,
    b64,
    entry_name,
    kind_prefix,
    list_prefix,
    mode_of,
    name_prefix,
    prefix_end,
    split_key,
    unb64,
)

__all__ = ["QUEUE_TTL", "SPARE_LEASES", "AsyncEtcdBackend", "lease_seconds"]

QUEUE_TTL = 2
"""Seconds a waiter's place in the queue outlives its last wait (etcd's smallest useful
lease: below the server's minimum TTL it is raised anyway)."""
SPARE_LEASES = 4
"""Leases kept per length, alive and without a key, for this process's next acquisitions."""
CLOSE_TIMEOUT = 1.0
"""Seconds for revoking the spare leases on close: a spare holds no key, and lapses on its
own if the cluster cannot be reached."""


def whole_seconds(ttl: float) -> int:
    """etcd leases are whole seconds: round up, never down."""
    return max(1, math.ceil(ttl - 1e-9))


def lease_seconds(ttl: float) -> int:
    """A holder's lease: the smallest whole number of seconds above ``ttl``, so that a lease
    refreshed up to ``seconds - ttl`` ago still lasts the whole ttl (module docstring)."""
    return math.floor(ttl) + 1


@dataclasses.dataclass
class _Lease:
    """An etcd lease this process granted."""

    id: str
    seconds: int
    refreshed: float
    """``time.monotonic()`` just before the grant or keep-alive that last restarted its clock
    was sent: the server ends it no sooner than ``refreshed + seconds``."""

    def lasts(self, ttl: float) -> bool:
        """Whether a key written on it now stays at least ``ttl`` seconds."""
        return self.refreshed + self.seconds - time.monotonic() >= ttl


@dataclasses.dataclass
class _Held:
    """What this process knows of one of its granted keys."""

    key: str
    lease: _Lease
    revision: int
    record: Record
    """What the key holds, rewritten whole when an election's value changes."""


@dataclasses.dataclass
class QueuePlace:
    """A waiter's state, carried by ``Busy.waiting`` between acquire and wait."""

    kind: str
    name: str
    key: str
    limit: int
    record: str
    value: str | None = None
    """The election value the key gets when it is granted (None: a lock or a permit)."""
    revision: int = 0
    """The key's creation revision once queued (0: not queued, or lapsed)."""
    lease: _Lease | None = None
    """The short queue lease the key is on."""
    watch_from: int = 0
    mode: str | None = None
    """A read-write lock's mode (None: a lock or a semaphore, ranked by ``limit``)."""
    queue_seconds: int = QUEUE_TTL
    """The queue lease's length."""
    holder_lease: _Lease | None = None
    """The lease the key moves onto when granted, kept alive with the queue lease."""
    predecessor: str | None = None
    """The key just ahead that the next wait watches (base64), as the last step read it."""
    predecessor_known: bool = False
    """Whether ``predecessor`` is fresh (None then: nothing ahead); a wait uses it once."""
    woken: bool = True
    """Whether the last wait may have seen the key ahead go (a deletion, an error: anything
    but a quiet timeout). After a quiet one the next step reads before it tries to write."""


def _kvs(response: JSON) -> list[JSON]:
    kvs: list[JSON] = response.get("response_range", response).get("kvs", [])
    return kvs


def _revision(answer: JSON) -> int:
    return int(answer["header"]["revision"])


def _put(key: str, value: str, lease: str) -> JSON:
    return {"request_put": {"key": b64(key), "value": value, "lease": lease}}


def _oldest(prefix: str, limit: int | None) -> JSON:
    request: JSON = {
        "key": b64(prefix), "range_end": b64(prefix_end(prefix)),
        "sort_order": "ASCEND", "sort_target": "CREATE",
    }
    if limit is not None:
        request["limit"] = str(limit)
    return {"request_range": request}


def _created_at(key: str, revision: int) -> JSON:
    return {"key": b64(key), "target": "CREATE", "result": "EQUAL",
            "create_revision": str(revision)}


def _empty(prefix: str) -> JSON:
    """A compare that holds when no key starts with ``prefix``."""
    return _created_at(prefix, 0) | {"range_end": b64(prefix_end(prefix))}


def _newest_before(prefix: str, revision: int) -> JSON:
    """A read of the newest key of the range created before ``revision``: the one a waiter
    whose key was created at ``revision`` watches."""
    return {"request_range": {
        "key": b64(prefix), "range_end": b64(prefix_end(prefix)),
        "sort_order": "DESCEND", "sort_target": "CREATE",
        "max_create_revision": str(revision - 1), "limit": "1", "keys_only": True,
    }}


def _none_before(prefix: str, revision: int) -> JSON:
    """A compare that holds when every key of the range was created at ``revision`` or
    later; etcd compares each key of a range. The range must hold the waiter's own key: on an
    empty range etcd compares a missing key (creation revision 0) and the compare fails."""
    return {"key": b64(prefix), "range_end": b64(prefix_end(prefix)), "target": "CREATE",
            "result": "GREATER", "create_revision": str(revision - 1)}


def _blocking(prefix: str, mode: str) -> str:
    """The keys of a read-write lock name that a ``mode`` key waits behind, as one range:
    every key for a writer, the write keys for a reader."""
    return prefix if mode == WRITE else prefix + entry_name(WRITE, "")


class AsyncEtcdBackend(AsyncOrderedQueueStore):
    """Options: ``namespace`` (the first segment of every key, default ``tenure``),
    ``timeout`` (seconds for each request, across members, default 5); for ``etcds://``,
    ``ssl_ca``, ``ssl_cert``, ``ssl_key``. Credentials in the URL use etcd's auth."""

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
    notifies = True
    max_backoff = 0.5
    """The longest single wait: each wait keeps the waiter's queue lease alive first."""

    def __init__(self, settings: EtcdSettings) -> None:
        self.settings = settings
        self.gateway = AsyncGateway(settings)
        self._held: dict[tuple[str, str, str], _Held] = {}
        self._spare: dict[int, list[_Lease]] = {}
        """Leases alive and without a key, by length, for the next acquisitions."""
        self._spare_pid = os.getpid()
        self._closed = False

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
        twin._spare = {}
        return twin

    async def aclose(self) -> None:
        self._closed = True
        spares = [lease for leases in self._spares_here().values() for lease in leases]
        self._spare = {}
        for lease in spares:
            try:
                await self._revoke(lease.id, timeout=CLOSE_TIMEOUT)
            except TenureError:
                break  # the cluster is out of reach: the others lapse on their own too
        await self.gateway.aclose()

    # ---- election values: a field of the holder's entry ------------------------------

    async def set_value(self, name: str, token: str, value: str) -> bool:
        held = self._held.get(("lock", name, token))
        if held is None:
            return False
        record = dataclasses.replace(held.record, value=value)
        key = held.key
        # The creation revision is the term: the put lands only on the key this lease was
        # granted, still alive (etcd deletes it with its lease), and keeps it on that lease.
        answer = await self.gateway.post("/v3/kv/txn", {
            "compare": [_created_at(key, held.revision)],
            "success": [{"request_put": {
                "key": b64(key), "value": record.encode(), "ignore_lease": True,
            }}],
        })
        if not answer.get("succeeded"):
            return False
        held.record = record
        return True

    # ---- the steps, once for both --------------------------------------------------------

    def _fence_key(self, kind: str, name: str) -> str:
        return name_prefix(self.settings.namespace, f"{kind}.fence", name)

    def _fence_here(self, kind: str, name: str) -> JSON:
        """The put that makes this transaction's revision the name's last fence (the fence
        key's mod revision, its value empty): for a grant whose key this transaction creates."""
        return {"request_put": {"key": b64(self._fence_key(kind, name)), "value": ""}}

    def _fence_at(self, kind: str, name: str, fence: int) -> JSON:
        """A nested transaction that records ``fence`` as the name's last fence unless a
        later one is recorded (module docstring): a missing key's mod revision is 0."""
        key = b64(self._fence_key(kind, name))
        value = b64(f"{fence:020d}")
        put = {"request_put": {"key": key, "value": value}}
        written = {"request_txn": {
            # A value below ours, and not empty (an empty value's fence is its mod revision,
            # which is not below ours here): "" compares below every value.
            "compare": [
                {"key": key, "target": "VALUE", "result": "GREATER", "value": ""},
                {"key": key, "target": "VALUE", "result": "LESS", "value": value},
            ],
            "success": [put],
        }}
        return {"request_txn": {
            "compare": [{"key": key, "target": "MOD", "result": "LESS",
                         "mod_revision": str(fence)}],
            "success": [put],
            "failure": [written],
        }}

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
        prefix = name_prefix(self.settings.namespace, kind, name)
        key = prefix + (token if mode is None else entry_name(mode, token))
        place = waited.waiting if waited is not None else None
        if isinstance(place, QueuePlace) and place.key == key and place.revision:
            return await self._settle(place, ttl, holder)
        kept = None
        if isinstance(place, QueuePlace) and place.key == key:
            kept, place.holder_lease = place.holder_lease, None
        if mode is not None:
            queue_seconds = QUEUE_TTL if queue_ttl is None else whole_seconds(queue_ttl)
            return await self._acquire_in_turn(
                kind, name, token, ttl, holder, mode=mode, queue_seconds=queue_seconds,
                kept=kept,
            )
        record = Record.new(holder, limit, value=value, ttl=ttl)
        lease = await self._lease_for(lease_seconds(ttl), ttl, kept)

        def first_try(lease: _Lease) -> JSON:
            put = _put(key, record.encode(), lease.id)
            if limit > 1:
                return {"success": [put, _oldest(prefix, limit)]}
            # A lock is written only into an empty range: never past a queued waiter; the
            # same step records the fence.
            return {
                "compare": [_empty(prefix)],
                "success": [put, self._fence_here(kind, name), _oldest(prefix, 1)],
                "failure": [_oldest(prefix, 1)],
            }

        answer, lease = await self._on_lease(first_try, lease)
        ranked = _kvs(answer["responses"][-1])
        mine = next((kv for kv in ranked if unb64(kv["key"]).decode() == key), None)
        stored = [Record.decode(kv.get("value", "")).limit for kv in ranked if kv is not mine]
        conflict = next((s for s in stored if s != limit), None)
        if mine is not None and conflict is None:
            revision = int(mine["create_revision"])
            if mine.get("lease") != lease.id:  # a retry found the key its lost reply wrote
                await self._keep_spare(lease)
                # That lease's clock restarts now: the holder gets its whole ttl from here.
                lease = _Lease(str(mine.get("lease", "0")), lease.seconds, 0.0)
                await self._refresh([lease])
                record = Record.decode(mine.get("value", ""))  # and keeps what it stored
            self._held[(kind, name, token)] = _Held(key, lease, revision, record)
            if limit > 1:
                await self._record_fence(kind, name, revision)
            return Grant(revision)
        if limit > 1:
            # Our key is written, not among the limit oldest: it goes, its lease stays ours.
            await self.gateway.post("/v3/kv/deleterange", {"key": b64(key)})
        if conflict is not None and kind == "semaphore":
            await self._keep_spare(lease)
            raise limit_mismatch(name, conflict, limit)
        queued = Record.new(holder, limit, queued=True).encode()
        return Busy(None, QueuePlace(kind, name, key, limit, queued, value, holder_lease=lease))

    async def _acquire_in_turn(
        self, kind: str, name: str, token: str, ttl: float, holder: Holder, *, mode: str,
        queue_seconds: int, kept: _Lease | None,
    ) -> Grant | Busy:
        """A read-write lock's first try: granted, or queued, in one transaction."""
        held = self._held.get((kind, name, token))
        if held is not None and await self._keep_alive(held.lease):
            return Grant(held.revision)  # a retry of a grant whose answer was lost
        prefix = name_prefix(self.settings.namespace, kind, name)
        key = prefix + entry_name(mode, token)
        lease = await self._lease_for(lease_seconds(ttl), ttl, kept)
        queue_lease = await self._lease_for(queue_seconds, queue_seconds / 2)
        record = Record.new(holder, 1, ttl=ttl)
        queued = Record.new(holder, 1, queued=True).encode()
        read_back = {"request_range": {"key": b64(key)}}

        def first_try(lease: _Lease) -> JSON:
            return {
                "compare": [_empty(_blocking(prefix, mode))],
                "success": [
                    _put(key, record.encode(), lease.id), self._fence_here(kind, name),
                    read_back,
                ],
                "failure": [_put(key, queued, queue_lease.id), read_back],
            }

        try:
            answer, lease = await self._on_lease(first_try, lease)
        except NotFound:
            # The queue lease ended before use (a spare that a break or expiry took): once
            # more on a new one.
            queue_lease = await self._new_lease(queue_seconds)
            answer, lease = await self._on_lease(first_try, lease)
        (mine,) = _kvs(answer["responses"][-1])
        revision = int(mine["create_revision"])
        if answer.get("succeeded"):
            self._held[(kind, name, token)] = _Held(key, lease, revision, record)
            await self._keep_spare(queue_lease)
            return Grant(revision)
        return Busy(None, QueuePlace(
            kind, name, key, 1, queued, None, revision, queue_lease, _revision(answer) + 1,
            mode, queue_seconds, holder_lease=lease,
        ))

    async def _settle(self, place: QueuePlace, ttl: float, holder: Holder) -> Grant | Busy:
        """A queued waiter's acquire: granted once its key is among the ``limit`` oldest."""
        prefix = name_prefix(self.settings.namespace, place.kind, place.name)
        if place.mode is not None:
            return await self._settle_in_turn(place, place.mode, ttl, holder)
        if place.limit == 1:
            return await self._take_in_turn(place, ttl, holder, prefix)
        answer = await self.gateway.post(
            "/v3/kv/range", _oldest(prefix, place.limit)["request_range"]
        )
        ranked = _kvs(answer)
        # Deletions up to this read are reflected in it: the next watch starts after it.
        place.watch_from = _revision(answer) + 1
        mine = next((kv for kv in ranked if unb64(kv["key"]).decode() == place.key), None)
        if mine is None:
            return Busy(None, place)
        if int(mine["create_revision"]) != place.revision:
            place.revision = 0  # our place lapsed and the key was written again: rejoin
            return Busy(None, place)
        conflict = next(
            (record.limit for kv in ranked if kv is not mine
             and (record := Record.decode(kv.get("value", ""))).limit != place.limit),
            None,
        )
        if conflict is not None:
            await self._leave(place)
            raise limit_mismatch(place.name, conflict, place.limit)
        return await self._take(place, ttl, holder, None)

    async def _settle_in_turn(
        self, place: QueuePlace, mode: str, ttl: float, holder: Holder
    ) -> Grant | Busy:
        """A read-write lock's waiter: granted once no key that blocks it is older."""
        prefix = name_prefix(self.settings.namespace, place.kind, place.name)
        blocking = _blocking(prefix, mode)
        if mode == WRITE:
            # Its own key is in the range, as a lock's waiter's.
            return await self._take_in_turn(place, ttl, holder, blocking)
        answer = await self.gateway.post("/v3/kv/txn", {"success": [
            {"request_range": {"key": b64(place.key)}},
            # Not count_only: etcd counts the whole range, before the revision filter.
            _newest_before(blocking, place.revision),
        ]})
        mine, ahead = (response["response_range"] for response in answer["responses"])
        place.watch_from = _revision(answer) + 1
        kvs = mine.get("kvs", [])
        if not kvs or int(kvs[0]["create_revision"]) != place.revision:
            place.revision = 0  # our place lapsed: join again at the back
            return Busy(None, place)
        if ahead.get("kvs"):
            place.predecessor, place.predecessor_known = ahead["kvs"][0]["key"], True
            return Busy(None, place)
        return await self._take(place, ttl, holder, None)

    async def _take_in_turn(
        self, place: QueuePlace, ttl: float, holder: Holder, ahead_in: str
    ) -> Grant | Busy:
        """A lock's waiter (or a writer's): the grant's transaction at once after a wait
        that may have seen the key ahead go; after a quiet timeout, a read first (every wait
        is followed by a fresh look, as watches can miss events, but a read is not a Raft
        write, as even a refused transaction with writes is)."""
        if not place.woken:
            answer = await self.gateway.post("/v3/kv/txn", {"success": [
                {"request_range": {"key": b64(place.key), "keys_only": True}},
                _newest_before(ahead_in, place.revision),
            ]})
            mine, ahead = (_kvs(response) for response in answer["responses"])
            place.watch_from = _revision(answer) + 1
            if not mine or int(mine[0]["create_revision"]) != place.revision:
                place.revision = 0  # our place lapsed: join again at the back
                return Busy(None, place)
            if ahead:
                place.predecessor, place.predecessor_known = ahead[0]["key"], True
                return Busy(None, place)
        return await self._take(place, ttl, holder, ahead_in)

    async def _take(
        self, place: QueuePlace, ttl: float, holder: Holder, ahead_in: str | None
    ) -> Grant | Busy:
        """Move our key onto our holder lease, if it is still the key we queued and, with
        ``ahead_in`` (a range holding our key), no key of that range is older: then it is
        our turn, judged in the step that grants it. Refused: our key and the key just
        ahead, read in the same step, for the next wait."""
        assert place.lease is not None
        lease = await self._lease_for(lease_seconds(ttl), ttl, place.holder_lease)
        place.holder_lease = None
        record = Record.new(holder, place.limit, value=place.value, ttl=ttl)
        compare = [_created_at(place.key, place.revision)]
        failure: list[JSON] = [{"request_range": {"key": b64(place.key)}}]
        if ahead_in is not None:
            compare.append(_none_before(ahead_in, place.revision))
            failure.append(_newest_before(ahead_in, place.revision))

        def move(lease: _Lease) -> JSON:
            return {
                "compare": compare,
                "success": [
                    _put(place.key, record.encode(), lease.id),
                    self._fence_at(place.kind, place.name, place.revision),
                ],
                "failure": failure,
            }

        answer, lease = await self._on_lease(move, lease)
        if not answer.get("succeeded"):
            place.holder_lease = lease
            mine = _kvs(answer["responses"][0])
            if not mine or int(mine[0]["create_revision"]) != place.revision:
                place.revision = 0  # our queue lease lapsed (a stalled waiter): rejoin
                return Busy(None, place)
            place.watch_from = _revision(answer) + 1
            if ahead_in is not None:
                ahead = _kvs(answer["responses"][1])
                place.predecessor = ahead[0]["key"] if ahead else None
                place.predecessor_known = True
            return Busy(None, place)
        await self._keep_spare(place.lease)  # the key left it; nothing else is on it
        place.lease = None
        token = place.key.rpartition("/")[2].rpartition(".")[2]
        self._held[(place.kind, place.name, token)] = _Held(
            place.key, lease, place.revision, record
        )
        return Grant(place.revision)

    async def _record_fence(self, kind: str, name: str, fence: int) -> None:
        """Remember the name's last fence for ``inspect``, never letting it go back."""
        await self.gateway.post("/v3/kv/txn", {"success": [self._fence_at(kind, name, fence)]})

    async def _wait(self, kind: str, name: str, busy: Busy | None, timeout: float) -> None:
        place = busy.waiting if busy is not None else None
        if not isinstance(place, QueuePlace):
            # Not queued (an election's observer): wake at the next deletion under the name
            # (a release, expiry or break), else after ``timeout``.
            prefix = name_prefix(self.settings.namespace, kind, name)
            await self.gateway.watch_deletes(b64(prefix), b64(prefix_end(prefix)), 0, timeout)
            return
        prefix = name_prefix(self.settings.namespace, place.kind, place.name)
        # One request keeps our place and the lease we will hold the name on alive: the
        # grant that may follow this wait then needs no lease request.
        leases = [lease for lease in (place.lease if place.revision else None,
                                      place.holder_lease) if lease is not None]
        alive = dict(zip((lease.id for lease in leases), await self._refresh(leases),
                         strict=True)) if leases else {}
        if place.holder_lease is not None and not alive[place.holder_lease.id]:
            place.holder_lease = None  # ended (a break of a spare?): the grant gets another
        if place.revision and place.lease is not None and not alive[place.lease.id]:
            place.revision = 0  # lapsed while we were away: join again
        if not place.revision:
            await self._join(place)
        if place.limit > 1:
            place.woken = await self.gateway.watch_deletes(
                b64(prefix), b64(prefix_end(prefix)), place.watch_from, timeout
            )
            return
        if place.mode is not None:
            prefix = _blocking(prefix, place.mode)  # a reader watches the newest write ahead
        if not place.predecessor_known:
            ahead = await self.gateway.post(
                "/v3/kv/range", _newest_before(prefix, place.revision)["request_range"]
            )
            predecessor = _kvs(ahead)
            place.predecessor = predecessor[0]["key"] if predecessor else None
            place.watch_from = _revision(ahead) + 1
        place.predecessor_known = False  # the next wait reads again, unless a step did
        place.woken = True  # nothing ahead: our turn, unless the step finds otherwise
        if place.predecessor is not None:
            place.woken = await self.gateway.watch_deletes(
                place.predecessor, None, place.watch_from, timeout
            )

    async def _abandon(self, name: str, busy: Busy) -> None:
        place = busy.waiting
        if isinstance(place, QueuePlace):
            await self._leave(place)

    async def _leave(self, place: QueuePlace) -> None:
        """Give up a place: the queue key goes with its lease; the holder lease stays ours."""
        lease, place.holder_lease = place.holder_lease, None
        if place.revision and place.lease is not None:
            place.revision = 0
            await self._revoke(place.lease.id)
        if lease is not None:
            await self._keep_spare(lease)

    async def _join(self, place: QueuePlace) -> None:
        """Write the waiter's key at the back of the queue, on a short queue lease, and read
        the key just ahead of it in the same step."""
        place.lease = await self._lease_for(place.queue_seconds, place.queue_seconds / 2)
        prefix = name_prefix(self.settings.namespace, place.kind, place.name)
        if place.mode is not None:
            prefix = _blocking(prefix, place.mode)
        newest = _oldest(prefix, 2)
        newest["request_range"] |= {"sort_order": "DESCEND", "keys_only": True}

        def join(lease: _Lease) -> JSON:
            return {"success": [
                _put(place.key, place.record, lease.id),
                {"request_range": {"key": b64(place.key)}},
                newest,
            ]}

        answer, place.lease = await self._on_lease(join, place.lease)
        (mine,) = _kvs(answer["responses"][1])
        place.revision = int(mine["create_revision"])
        place.watch_from = _revision(answer) + 1
        # The newest key other than ours is the one just ahead when ours is the newest, as
        # a new key is; a key of ours that outlived its lapsed place keeps its old creation
        # revision, and then the wait reads the key ahead itself.
        others = [kv for kv in _kvs(answer["responses"][2]) if kv["key"] != mine["key"]]
        place.predecessor_known = not others or int(others[0]["create_revision"]) < place.revision
        place.predecessor = others[0]["key"] if others and place.predecessor_known else None

    async def release(self, kind: Kind, name: str, token: str) -> bool:
        held = self._held.pop((kind, name, token), None)
        if held is not None:
            answer = await self.gateway.post("/v3/kv/deleterange", {"key": b64(held.key)})
            if int(answer.get("deleted", 0)) == 0:
                return False  # gone with its lease (expiry, a break): the lease is dropped
            await self._keep_spare(held.lease)  # alive until this delete, and now keyless
            return True
        # An undo, or a waiter leaving its place: whatever key this token wrote goes with its
        # lease; only a key that held the name counts as released.
        kv = await self._entry_of(kind, name, token)
        if kv is None:
            return False
        revoked = await self._revoke(str(kv.get("lease", "0")))
        return revoked and not Record.decode(kv.get("value", "")).queued

    async def _extend_many(self, kind: str, renewals: Sequence[Renewal]) -> list[bool]:
        results: dict[int, bool] = {}
        batch: list[tuple[int, _Lease]] = []
        for index, renewal in enumerate(renewals):
            held = self._held.get((kind, renewal.name, renewal.token))
            if held is None:
                results[index] = False
            elif lease_seconds(renewal.ttl) == held.lease.seconds:
                batch.append((index, held.lease))
            else:
                results[index] = await self._move(kind, renewal, held)
        if batch:
            alive = await self._refresh([lease for _, lease in batch])
            results.update((index, ok) for (index, _), ok in zip(batch, alive, strict=True))
        return [results[index] for index in range(len(renewals))]

    async def _move(self, kind: str, renewal: Renewal, held: _Held) -> bool:
        """A new ttl: the key moves to a new lease of that many seconds, if it is still ours."""
        lease = await self._new_lease(lease_seconds(renewal.ttl))
        key = held.key
        # The record is rewritten whole (it is the one stored: the grant and every election
        # value wrote it), with the new ttl for ``inspect``.
        record = dataclasses.replace(held.record, ttl=renewal.ttl)
        moved = await self.gateway.post("/v3/kv/txn", {
            "compare": [_created_at(key, held.revision)],
            "success": [_put(key, record.encode(), lease.id)],
        })
        if not moved.get("succeeded") or not await self._keep_alive(held.lease):
            await self._revoke(lease.id)
            return False
        await self._revoke(held.lease.id)
        held.lease, held.record = lease, record
        return True

    async def owned(self, kind: Kind, name: str, token: str) -> bool:
        held = self._held.get((kind, name, token))
        if held is None:
            return False
        kvs = _kvs(await self.gateway.post("/v3/kv/range", {"key": b64(held.key)}))
        return bool(kvs) and int(kvs[0]["create_revision"]) == held.revision

    async def inspect(self, kind: Kind, name: str) -> LockInfo | None:
        prefix = name_prefix(self.settings.namespace, kind, name)
        fence_key = self._fence_key(kind, name)
        answer = await self.gateway.post("/v3/kv/txn", {"success": [
            _oldest(prefix, None), {"request_range": {"key": b64(fence_key)}},
        ]})
        keys, fence = (_kvs(response) for response in answer["responses"])
        if not fence and not keys:
            return None
        return await self._info(kind, name, keys, _fence_of(fence[0]) if fence else 0)

    async def list_records(self, kind: Kind, prefix: str) -> list[LockInfo]:
        namespace = self.settings.namespace
        start = list_prefix(namespace, kind, prefix)
        fence_start = list_prefix(namespace, f"{kind}.fence", prefix)
        answer = await self.gateway.post("/v3/kv/txn", {"success": [
            {"request_range": {"key": b64(start), "range_end": b64(prefix_end(
                kind_prefix(namespace, kind))), "sort_order": "ASCEND",
                "sort_target": "CREATE"}},
            {"request_range": {"key": b64(fence_start), "range_end": b64(prefix_end(
                kind_prefix(namespace, f"{kind}.fence")))}},
        ]})
        keys, fences = (_kvs(response) for response in answer["responses"])
        by_name: dict[str, list[JSON]] = {}
        for kv in keys:
            key_name = split_key(namespace, kind, unb64(kv["key"]).decode())[0]
            if key_name.startswith(prefix):
                by_name.setdefault(key_name, []).append(kv)
        found = []
        for kv in fences:
            fence_name = split_key(namespace, f"{kind}.fence", unb64(kv["key"]).decode())[0]
            if fence_name.startswith(prefix):
                found.append(await self._info(
                    kind, fence_name, by_name.get(fence_name, []), _fence_of(kv)
                ))
        return sorted(found, key=lambda info: info.name)

    async def _info(self, kind: str, name: str, keys: list[JSON], fence: int) -> LockInfo:
        """The holders are the ``limit`` oldest keys; the rest are waiting."""
        if kind == "rwlock":
            return await self._info_in_turn(name, keys, fence)
        records = [Record.decode(kv.get("value", "")) for kv in keys]
        limit = records[0].limit if records else None
        ranked = list(zip(keys, records, strict=True))
        # A queued key among the oldest holds nothing yet: its waiter is about to move it
        # onto its own lease (or to give up). Showing it would report a leader that may never be.
        held = [(kv, record) for kv, record in ranked[: (limit or 1) if kind == "semaphore"
                else 1] if not record.queued]
        leases = []
        values = []
        for kv, record in held:
            left = await self._time_to_live(str(kv.get("lease", "0")))
            if left >= 0:  # etcd counts whole seconds: 0 is a lease in its last second
                leases.append(LeaseInfo(
                    record.holder, _utc(record.since), _ttl_left(left, record),
                    int(kv["create_revision"]),
                ))
                values.append(record.value)
        if kind == "semaphore":
            return LockInfo(name, fence, None, None, None, kind="semaphore", limit=limit,
                            leases=tuple(leases))
        if not leases:
            return LockInfo(name, fence, None, None, None)
        (lease,) = leases
        # The holder key's own creation revision, read with its holder and value: the name's
        # fence key is written just after a grant, so it may still show the previous term.
        return LockInfo(
            name, max(fence, lease.fence or 0), lease.holder, lease.acquired_at, lease.ttl_left,
            value=values[0],
        )

    async def _info_in_turn(self, name: str, keys: list[JSON], fence: int) -> LockInfo:
        """A read-write lock: every key not marked queued holds the name (only a grant
        writes one), oldest first, with the mode its key names; the queued ones wait."""
        leases = []
        queued = 0
        for kv in keys:
            record = Record.decode(kv.get("value", ""))
            if record.queued:
                queued += 1
                continue
            left = await self._time_to_live(str(kv.get("lease", "0")))
            if left >= 0:
                leases.append(LeaseInfo(
                    record.holder, _utc(record.since), _ttl_left(left, record),
                    int(kv["create_revision"]),
                    mode=mode_of(unb64(kv["key"]).decode().rpartition("/")[2]),
                ))
        # The fence key is written just after a grant: the newest lease may be ahead of it.
        fence = max([fence, *(lease.fence or 0 for lease in leases)])
        return LockInfo(name, fence, None, None, None, kind="rwlock", leases=tuple(leases),
                        queued=queued)

    async def break_leases(self, kind: Kind, name: str) -> bool:
        info_keys = _kvs(await self.gateway.post(
            "/v3/kv/range",
            _oldest(name_prefix(self.settings.namespace, kind, name), None)["request_range"],
        ))
        records = [Record.decode(kv.get("value", "")) for kv in info_keys]
        count = (records[0].limit or 1) if records and kind == "semaphore" else 1
        if kind == "rwlock":
            count = len(records)  # every reader, or the writer; the queued ones are skipped
        broken = False
        for kv, record in list(zip(info_keys, records, strict=True))[:count]:
            if record.queued:
                continue  # a waiter about to be granted holds nothing yet: not ours to break
            broken = await self._revoke(str(kv.get("lease", "0"))) or broken
        return broken

    # ---- leases ------------------------------------------------------------------------

    async def _grant(self, seconds: int) -> str:
        answer = await self.gateway.post("/v3/lease/grant", {"TTL": str(seconds)})
        return str(answer["ID"])

    async def _new_lease(self, seconds: int) -> _Lease:
        refreshed = time.monotonic()  # before the request: the server's clock starts later
        return _Lease(await self._grant(seconds), seconds, refreshed)

    async def _lease_for(self, seconds: int, ttl: float, kept: _Lease | None = None) -> _Lease:
        """A lease of ``seconds`` on which a key written now lasts at least ``ttl``: ``kept``
        (the one an attempt holds ready) or a spare, as it is if its clock restarted recently
        enough, else once kept alive; a new grant when none is left alive."""
        if kept is not None and kept.seconds != seconds:
            await self._keep_spare(kept)
            kept = None
        spares = self._spares_here().get(seconds, [])
        lease = kept if kept is not None else spares.pop() if spares else None
        if lease is None:
            return await self._new_lease(seconds)
        if lease.lasts(ttl) or await self._refresh([lease]) == [True]:
            return lease
        return await self._new_lease(seconds)  # ended meanwhile (a break, or expired)

    async def _on_lease(
        self, txn: Callable[[_Lease], JSON], lease: _Lease
    ) -> tuple[JSON, _Lease]:
        """Send the transaction ``txn(lease)`` writes; if etcd answers that the lease is not
        found (a spare ended meanwhile: a break, or a stall past its length), once more on a
        new lease. The answer, and the lease it used."""
        try:
            return await self.gateway.post("/v3/kv/txn", txn(lease)), lease
        except NotFound:
            lease = await self._new_lease(lease.seconds)
            return await self.gateway.post("/v3/kv/txn", txn(lease)), lease

    def _spares_here(self) -> dict[int, list[_Lease]]:
        if self._spare_pid != os.getpid():
            # A forked child: its parent's spares are its parent's to write on (rule 8).
            self._spare, self._spare_pid = {}, os.getpid()
        return self._spare

    async def _keep_spare(self, lease: _Lease) -> None:
        """Keep ``lease`` (alive, no key on it) for a next acquisition; revoke it when enough
        of its length are kept, or the backend is closed."""
        spares = self._spares_here().setdefault(lease.seconds, [])
        if len(spares) < SPARE_LEASES and not self._closed:
            spares.append(lease)
            return
        with contextlib.suppress(TenureError):
            await self._revoke(lease.id)  # else it lapses on its own: it holds no key

    async def _revoke(self, lease: str, *, timeout: float | None = None) -> bool:
        """Revoke ``lease`` (its keys go with it); False if it was already gone."""
        if not lease or lease == "0":
            return False
        try:
            await self.gateway.post("/v3/lease/revoke", {"ID": lease}, timeout=timeout)
        except NotFound:
            return False
        return True

    async def _keep_alive(self, lease: _Lease) -> bool:
        (alive,) = await self._refresh([lease])
        return alive

    async def _refresh(self, leases: Sequence[_Lease]) -> list[bool]:
        """Keep ``leases`` alive, in one request (the gateway reads a stream of
        keep-alives): which ones were, their clocks restarted."""
        sent = time.monotonic()
        alive = await self._keep_alive_many([lease.id for lease in leases])
        for lease, ok in zip(leases, alive, strict=True):
            if ok:
                lease.refreshed = sent
        return alive

    async def _keep_alive_many(self, leases: list[str]) -> list[bool]:
        body = "".join(f'{{"ID":"{lease}"}}' for lease in leases)
        answer = await self.gateway.post_stream("/v3/lease/keepalive", body)
        alive = {str(item["result"]["ID"]) for item in answer
                 if int(item.get("result", {}).get("TTL", 0)) > 0}
        return [lease in alive for lease in leases]

    async def _time_to_live(self, lease: str) -> float:
        if not lease or lease == "0":
            return -1.0
        answer = await self.gateway.post("/v3/lease/timetolive", {"ID": lease})
        return float(answer.get("TTL", 0))  # -1: expired or revoked

    async def _entry_of(self, kind: str, name: str, token: str) -> JSON | None:
        """The key ``token`` wrote under ``name`` (either mode's, for a read-write lock)."""
        prefix = name_prefix(self.settings.namespace, kind, name)
        if kind != "rwlock":
            kvs = _kvs(await self.gateway.post("/v3/kv/range", {"key": b64(prefix + token)}))
            return kvs[0] if kvs else None
        answer = await self.gateway.post("/v3/kv/txn", {"success": [
            {"request_range": {"key": b64(prefix + entry_name(mode, token))}}
            for mode in MODES
        ]})
        found = [kv for response in answer["responses"] for kv in _kvs(response)]
        return found[0] if found else None


def _ttl_left(left: float, record: Record) -> float:
    """The seconds left that ``inspect`` reports: the lease's (etcd counts whole seconds: 0
    is a lease in its last second), at most the ttl its holder asked for (its lease is up to
    a second longer, ``lease_seconds``, which ``lease_overrun`` accounts for)."""
    left = max(left, 0.5)
    return left if record.ttl is None else min(left, record.ttl)


def _fence_of(kv: JSON) -> int:
    """The last fence a fence key records: its value, else (empty) its mod revision."""
    value = kv.get("value", "")
    return int(unb64(value)) if value else int(kv["mod_revision"])


def _utc(since: float) -> Any:
    import datetime

    return datetime.datetime.fromtimestamp(since, datetime.UTC)
