"""etcd for asyncio: locks and semaphores as ordered keys, one mechanism for both.

A lock is the case ``limit = 1`` of the same queue a semaphore uses: every holder and waiter
of a name writes a key of its own (``_keys``), the ``limit`` oldest keys by creation revision
hold the name, and a waiter watches for a deletion ahead of it. The steps:

- **Acquire, first try**: one lease (the ttl rounded up to whole seconds, etcd's unit: a
  holder may keep the name up to a second longer than asked, never shorter; the client's
  own deadline still uses the exact ttl, so ``check()`` errs early) and ONE transaction that
  writes the key on that lease and reads the ``limit`` oldest keys. A lock writes only if the
  name has no key at all (a compare on the whole range), so it never barges past waiters; a
  semaphore writes, and its key is granted if it is among the ``limit`` oldest, else removed.
- **Waiting**: the waiter writes its key on a short queue lease (``QUEUE_TTL``), kept alive
  by each wait, and watches the key just before its own (a lock), or the name's range (a
  semaphore), for a deletion. A waiter that dies or gives up leaves the queue within
  ``QUEUE_TTL`` seconds. Every wait is bounded and followed by a fresh read (watch streams
  can miss or repeat events: etcd issues #20655, #18879).
- **Granted from the queue**: once its key is among the ``limit`` oldest, the waiter moves it
  onto a lease of its ttl, in one transaction guarded by the key's creation revision.
- **Release**: revoking the holder's lease deletes its key in one step; watchers wake.
- **Renewal**: a batch of leases kept alive in one request; a lease that expired or was
  revoked (by a break) answers TTL 0: lost.
- **Election values** (``AsyncLeaseValueSupport``): the leader's value is a field of the
  holder key's record, written by the transaction that grants the key, replaced by a
  transaction that compares the key's creation revision (only the live holder's key, never a
  later one), and deleted with the key when its lease ends (release, expiry, break). A
  waiter's key is marked ``queued`` and carries no value: it is nobody's leadership until the
  transaction that grants it. ``inspect`` takes holder, value and term (the key's creation
  revision) from that one key, read in one transaction.

Fence: the holder key's creation revision. A ``{kind}.fence`` key per name remembers the last
fence granted, for ``inspect`` after release.

**Read-write and fair locks** (kind ``rwlock``, ``tenure._async.ordered_queue`` for the rule
and the fence argument): the same keys, with the mode in the key's name (``_keys``), so that
a name's write keys are one key range.

- **Acquire, first try**: two leases (the ttl, and the place's ``queue_ttl``, both rounded up
  to whole seconds) and ONE transaction: if no key at all (a writer) or no write key (a
  reader) exists under the name, it writes the key on the ttl lease: granted, fence = its
  creation revision; otherwise it writes the key marked ``queued`` on the queue lease: a
  place at the back of the queue, in the same step. The lease the transaction did not use
  is revoked (the ttl lease) or left to lapse within seconds (the queue lease: revoking it
  would cost the grant a round trip).
- **Waiting**: each wait keeps the queue lease alive, then watches for the deletion of the
  newest key ahead that blocks this one: any key for a writer, the newest write key for a
  reader. A place whose lease lapsed (a waiter stalled past ``queue_ttl``) is gone for good:
  its waiter writes its key again, at the back, with a new creation revision.
- **Granted from the queue**: one read that counts the blocking keys created before ours
  (none left: our turn), then the same move onto a ttl lease as a lock's waiter, guarded by
  our key's creation revision; its fence is that creation revision.
- **Release, renewal, break** as for locks; a waiter that gives up revokes its queue lease,
  which deletes its place. ``inspect`` reports every key not marked queued as a lease with
  its mode, and counts the queued ones.

Why the grant from the queue may read, then write, where the first try may not: the keys
that block a waiter are all older than its own, and no key older than it can appear any more
(a new key gets a higher revision), so once none is left, none comes back; the move only has
to find our own key still there, created at the same revision.
"""

from __future__ import annotations

import copy
import dataclasses
import math
from collections.abc import Sequence
from typing import Any

from tenure._async.capabilities import MODES, WRITE, AsyncLeaseValueSupport
from tenure._async.ordered_queue import AsyncOrderedQueueBackend
from tenure._errors import limit_mismatch
from tenure._types import Busy, Capabilities, Grant, Holder, LeaseInfo, LockInfo, Renewal
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

__all__ = ["QUEUE_TTL", "AsyncEtcdBackend"]

QUEUE_TTL = 2
"""Seconds a waiter's place in the queue outlives its last wait (etcd's smallest useful
lease: below the server's minimum TTL it is raised anyway)."""


def whole_seconds(ttl: float) -> int:
    """etcd leases are whole seconds: round up, never down."""
    return max(1, math.ceil(ttl - 1e-9))


@dataclasses.dataclass
class _Held:
    """What this process knows of one of its granted keys."""

    key: str
    lease: str
    ttl: int
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
    lease: str = ""
    """The short queue lease the key is on."""
    watch_from: int = 0
    mode: str | None = None
    """A read-write lock's mode (None: a lock or a semaphore, ranked by ``limit``)."""
    queue_seconds: int = QUEUE_TTL
    """The queue lease's length."""


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


def _blocking(prefix: str, mode: str) -> str:
    """The keys of a read-write lock name that a ``mode`` key waits behind, as one range:
    every key for a writer, the write keys for a reader."""
    return prefix if mode == WRITE else prefix + entry_name(WRITE, "")


class AsyncEtcdBackend(AsyncOrderedQueueBackend, AsyncLeaseValueSupport):
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

    @classmethod
    def from_url(cls, url: str, **options: Any) -> AsyncEtcdBackend:
        return cls(parse(url, options))

    def describe(self) -> str:
        return self.settings.display

    def renewal_backend(self) -> AsyncEtcdBackend:
        """An instance with a gateway of its own (httpx's asyncio clients belong to the loop
        that opened them) and this one's record of granted keys, shared: a renewal finds
        the lease of a key by it, and moves the key to a new lease in it (``_move``). etcd
        leases belong to no connection: any client may keep one alive."""
        twin = copy.copy(self)
        twin.gateway = AsyncGateway(self.settings)
        return twin

    async def aclose(self) -> None:
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
        if mode is not None:
            queue_seconds = QUEUE_TTL if queue_ttl is None else whole_seconds(queue_ttl)
            return await self._acquire_in_turn(
                kind, name, token, ttl, holder, mode=mode, queue_seconds=queue_seconds
            )
        record = Record.new(holder, limit, value=value)
        lease = await self._grant(whole_seconds(ttl))
        oldest = _oldest(prefix, limit)
        txn: JSON = {"success": [_put(key, record.encode(), lease), oldest]}
        if limit == 1:
            # A lock is written only into an empty range: never past a queued waiter.
            txn["compare"] = [_empty(prefix)]
            txn["failure"] = [oldest]
        answer = await self.gateway.post("/v3/kv/txn", txn)
        ranked = _kvs(answer["responses"][-1])
        mine = next((kv for kv in ranked if unb64(kv["key"]).decode() == key), None)
        stored = [Record.decode(kv.get("value", "")).limit for kv in ranked if kv is not mine]
        conflict = next((s for s in stored if s != limit), None)
        if mine is not None and conflict is None:
            revision = int(mine["create_revision"])
            if mine.get("lease") != lease:  # a retry found the key its lost reply wrote
                await self._revoke(lease)
                lease = str(mine.get("lease", "0"))
                record = Record.decode(mine.get("value", ""))  # and keeps what it stored
            self._held[(kind, name, token)] = _Held(
                key, lease, whole_seconds(ttl), revision, record
            )
            await self._record_fence(kind, name, revision)
            return Grant(revision)
        await self._revoke(lease)  # removes our key, if this try wrote one
        if conflict is not None and kind == "semaphore":
            raise limit_mismatch(name, conflict, limit)
        queued = Record.new(holder, limit, queued=True).encode()
        return Busy(None, QueuePlace(kind, name, key, limit, queued, value))

    async def _acquire_in_turn(
        self, kind: str, name: str, token: str, ttl: float, holder: Holder, *, mode: str,
        queue_seconds: int,
    ) -> Grant | Busy:
        """A read-write lock's first try: granted, or queued, in one transaction."""
        held = self._held.get((kind, name, token))
        if held is not None and await self._keep_alive(held.lease):
            return Grant(held.revision)  # a retry of a grant whose answer was lost
        prefix = name_prefix(self.settings.namespace, kind, name)
        key = prefix + entry_name(mode, token)
        seconds = whole_seconds(ttl)
        lease = await self._grant(seconds)
        queue_lease = await self._grant(queue_seconds)
        record = Record.new(holder, 1)
        queued = Record.new(holder, 1, queued=True).encode()
        read_back = {"request_range": {"key": b64(key)}}
        answer = await self.gateway.post("/v3/kv/txn", {
            "compare": [_empty(_blocking(prefix, mode))],
            "success": [_put(key, record.encode(), lease), read_back],
            "failure": [_put(key, queued, queue_lease), read_back],
        })
        (mine,) = _kvs(answer["responses"][-1])
        revision = int(mine["create_revision"])
        if answer.get("succeeded"):
            self._held[(kind, name, token)] = _Held(key, lease, seconds, revision, record)
            await self._record_fence(kind, name, revision)
            return Grant(revision)
        await self._revoke(lease)
        return Busy(None, QueuePlace(
            kind, name, key, 1, queued, None, revision, queue_lease, _revision(answer) + 1,
            mode, queue_seconds,
        ))

    async def _settle(self, place: QueuePlace, ttl: float, holder: Holder) -> Grant | Busy:
        """A queued waiter's acquire: granted once its key is among the ``limit`` oldest."""
        if place.mode is not None:
            return await self._settle_in_turn(place, place.mode, ttl, holder)
        prefix = name_prefix(self.settings.namespace, place.kind, place.name)
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
            await self._revoke(place.lease)
            place.revision = 0
            raise limit_mismatch(place.name, conflict, place.limit)
        return await self._take(place, ttl, holder)

    async def _settle_in_turn(
        self, place: QueuePlace, mode: str, ttl: float, holder: Holder
    ) -> Grant | Busy:
        """A read-write lock's waiter: granted once no key that blocks it is older."""
        prefix = name_prefix(self.settings.namespace, place.kind, place.name)
        blocking = _blocking(prefix, mode)
        answer = await self.gateway.post("/v3/kv/txn", {"success": [
            {"request_range": {"key": b64(place.key)}},
            {"request_range": {
                "key": b64(blocking), "range_end": b64(prefix_end(blocking)),
                # Not count_only: etcd counts the whole range, before this filter.
                "max_create_revision": str(place.revision - 1), "keys_only": True,
                "limit": "1",
            }},
        ]})
        mine, ahead = (response["response_range"] for response in answer["responses"])
        place.watch_from = _revision(answer) + 1
        kvs = mine.get("kvs", [])
        if not kvs or int(kvs[0]["create_revision"]) != place.revision:
            place.revision = 0  # our place lapsed: join again at the back
            return Busy(None, place)
        if ahead.get("kvs"):
            return Busy(None, place)
        return await self._take(place, ttl, holder)

    async def _take(self, place: QueuePlace, ttl: float, holder: Holder) -> Grant | Busy:
        """Our turn: move our key onto a lease of ``ttl``, if it is still the key we queued."""
        seconds = whole_seconds(ttl)
        lease = await self._grant(seconds)
        record = Record.new(holder, place.limit, value=place.value)
        moved = await self.gateway.post("/v3/kv/txn", {
            "compare": [_created_at(place.key, place.revision)],
            "success": [_put(place.key, record.encode(), lease)],
        })
        if not moved.get("succeeded"):
            # Our queue lease lapsed (a stalled waiter): join again at the back.
            await self._revoke(lease)
            place.revision = 0
            return Busy(None, place)
        await self._revoke(place.lease)  # the key left it; nothing else is on it
        token = place.key.rpartition("/")[2].rpartition(".")[2]
        self._held[(place.kind, place.name, token)] = _Held(
            place.key, lease, seconds, place.revision, record
        )
        await self._record_fence(place.kind, place.name, place.revision)
        return Grant(place.revision)

    async def _record_fence(self, kind: str, name: str, fence: int) -> None:
        """Remember the name's last fence for ``inspect``, never letting it go back: the
        value is the fence zero-padded, so etcd's byte-wise compare orders it as a number."""
        key = b64(self._fence_key(kind, name))
        value = b64(f"{fence:020d}")
        put = {"request_put": {"key": key, "value": value}}
        answer = await self.gateway.post("/v3/kv/txn", {
            "compare": [{"key": key, "target": "VALUE", "result": "LESS", "value": value}],
            "success": [put],
        })
        if not answer.get("succeeded"):
            # A VALUE compare fails on a missing key: the name's first fence.
            await self.gateway.post("/v3/kv/txn", {
                "compare": [{"key": key, "target": "CREATE", "result": "EQUAL",
                             "create_revision": "0"}],
                "success": [put],
            })

    async def _wait(self, kind: str, name: str, busy: Busy | None, timeout: float) -> None:
        place = busy.waiting if busy is not None else None
        if not isinstance(place, QueuePlace):
            # Not queued (an election's observer): wake at the next deletion under the name
            # (a release, expiry or break), else after ``timeout``.
            prefix = name_prefix(self.settings.namespace, kind, name)
            await self.gateway.watch_deletes(b64(prefix), b64(prefix_end(prefix)), 0, timeout)
            return
        prefix = name_prefix(self.settings.namespace, place.kind, place.name)
        if place.revision and not await self._keep_alive(place.lease):
            place.revision = 0  # lapsed while we were away: join again
        if not place.revision:
            await self._join(place)
        if place.limit > 1:
            await self.gateway.watch_deletes(
                b64(prefix), b64(prefix_end(prefix)), place.watch_from, timeout
            )
            return
        if place.mode is not None:
            prefix = _blocking(prefix, place.mode)  # a reader watches the newest write ahead
        ahead = await self.gateway.post("/v3/kv/range", {
            "key": b64(prefix), "range_end": b64(prefix_end(prefix)),
            "sort_order": "DESCEND", "sort_target": "CREATE",
            "max_create_revision": str(place.revision - 1), "limit": "1", "keys_only": True,
        })
        predecessor = _kvs(ahead)
        if predecessor:
            await self.gateway.watch_deletes(
                predecessor[0]["key"], None, _revision(ahead) + 1, timeout
            )

    async def abandon_wait(self, name: str, busy: Busy) -> None:
        place = busy.waiting
        if isinstance(place, QueuePlace) and place.revision:
            place.revision = 0
            await self._revoke(place.lease)  # the queue key goes with its lease

    async def _join(self, place: QueuePlace) -> None:
        """Write the waiter's key at the back of the queue, on a short queue lease."""
        place.lease = await self._grant(place.queue_seconds)
        answer = await self.gateway.post("/v3/kv/txn", {
            "success": [
                _put(place.key, place.record, place.lease),
                {"request_range": {"key": b64(place.key)}},
            ],
        })
        (mine,) = _kvs(answer["responses"][-1])
        place.revision = int(mine["create_revision"])
        place.watch_from = _revision(answer) + 1

    async def _release(self, kind: str, name: str, token: str) -> bool:
        held = self._held.pop((kind, name, token), None)
        if held is not None:
            return await self._revoke(held.lease)
        # An undo, or a waiter leaving its place: whatever key this token wrote goes with its
        # lease; only a key that held the name counts as released.
        kv = await self._entry_of(kind, name, token)
        if kv is None:
            return False
        revoked = await self._revoke(str(kv.get("lease", "0")))
        return revoked and not Record.decode(kv.get("value", "")).queued

    async def _extend_many(self, kind: str, renewals: Sequence[Renewal]) -> list[bool]:
        results: dict[int, bool] = {}
        batch: list[tuple[int, str]] = []
        for index, renewal in enumerate(renewals):
            held = self._held.get((kind, renewal.name, renewal.token))
            if held is None:
                results[index] = False
            elif whole_seconds(renewal.ttl) == held.ttl:
                batch.append((index, held.lease))
            else:
                results[index] = await self._move(kind, renewal, held)
        if batch:
            alive = await self._keep_alive_many([lease for _, lease in batch])
            results.update((index, ok) for (index, _), ok in zip(batch, alive, strict=True))
        return [results[index] for index in range(len(renewals))]

    async def _move(self, kind: str, renewal: Renewal, held: _Held) -> bool:
        """A new ttl: the key moves to a new lease of that many seconds, if it is still ours."""
        seconds = whole_seconds(renewal.ttl)
        lease = await self._grant(seconds)
        key = held.key
        moved = await self.gateway.post("/v3/kv/txn", {
            "compare": [_created_at(key, held.revision)],
            "success": [{"request_put": {"key": b64(key), "lease": lease, "ignore_value": True}}],
        })
        if not moved.get("succeeded") or not await self._keep_alive(held.lease):
            await self._revoke(lease)
            return False
        await self._revoke(held.lease)
        held.lease, held.ttl = lease, seconds
        return True

    async def _owned(self, kind: str, name: str, token: str) -> bool:
        held = self._held.get((kind, name, token))
        if held is None:
            return False
        kvs = _kvs(await self.gateway.post("/v3/kv/range", {"key": b64(held.key)}))
        return bool(kvs) and int(kvs[0]["create_revision"]) == held.revision

    async def _inspect(self, kind: str, name: str) -> LockInfo | None:
        prefix = name_prefix(self.settings.namespace, kind, name)
        fence_key = self._fence_key(kind, name)
        answer = await self.gateway.post("/v3/kv/txn", {"success": [
            _oldest(prefix, None), {"request_range": {"key": b64(fence_key)}},
        ]})
        keys, fence = (_kvs(response) for response in answer["responses"])
        if not fence and not keys:
            return None
        return await self._info(kind, name, keys, _fence_of(fence[0]) if fence else 0)

    async def _list(self, kind: str, prefix: str) -> list[LockInfo]:
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
                    record.holder, _utc(record.since), max(left, 0.5),
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
                    record.holder, _utc(record.since), max(left, 0.5),
                    int(kv["create_revision"]),
                    mode=mode_of(unb64(kv["key"]).decode().rpartition("/")[2]),
                ))
        # The fence key is written just after a grant: the newest lease may be ahead of it.
        fence = max([fence, *(lease.fence or 0 for lease in leases)])
        return LockInfo(name, fence, None, None, None, kind="rwlock", leases=tuple(leases),
                        queued=queued)

    async def _break(self, kind: str, name: str) -> bool:
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

    async def _revoke(self, lease: str) -> bool:
        """Revoke ``lease`` (its keys go with it); False if it was already gone."""
        if not lease or lease == "0":
            return False
        try:
            await self.gateway.post("/v3/lease/revoke", {"ID": lease})
        except NotFound:
            return False
        return True

    async def _keep_alive(self, lease: str) -> bool:
        (alive,) = await self._keep_alive_many([lease])
        return alive

    async def _keep_alive_many(self, leases: list[str]) -> list[bool]:
        """One request for the whole batch: the gateway reads a stream of keep-alives."""
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


def _fence_of(kv: JSON) -> int:
    return int(unb64(kv.get("value", "") or b64("0")))


def _utc(since: float) -> Any:
    import datetime

    return datetime.datetime.fromtimestamp(since, datetime.UTC)
