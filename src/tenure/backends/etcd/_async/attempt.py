"""An etcd acquire call's tries: its place in the name's queue, kept between them.

- **Waiting**: the waiter writes its key on a short queue lease (``QUEUE_TTL``), in a
  transaction that also reads the key just ahead, and watches that key (a lock), or the
  name's range (a semaphore), for a deletion. Each later wait first keeps alive, in one
  request, the queue lease and the lease the waiter will hold the name on (granted by its
  first try, so that the grant needs no lease request). A waiter that dies or gives up
  leaves the queue within ``QUEUE_TTL`` seconds: its place is on the queue lease, not on a
  lease of its ttl, so a dead waiter at the head holds the name back for seconds, not for a
  whole ttl. Every wait is bounded and followed by a fresh step (watch streams can miss or
  repeat events: etcd issues #20655, #18879). A read-write lock's waiter (its place written
  by its first try) watches the newest key ahead that blocks it: any key for a writer, the
  newest write key for a reader. A place whose lease lapsed (a waiter stalled past
  ``queue_ttl``) is gone for good: its waiter writes its key again, at the back, with a new
  creation revision.
- **Granted from the queue** (a lock's waiter not granted at the head, below; a writer of a
  read-write lock): it sends ONE
  transaction: if its key is still the one it queued (same creation revision) and no key
  in the name's range is older, it moves the key onto its holder lease (its value now the
  holder record) and records the fence; else it reads its key and the key just ahead, for
  the next wait. That is after a wait that may have seen the key ahead go (a deletion, an
  error); after a quiet timeout the waiter reads first (every wait is followed by a fresh
  look), as a transaction with writes is a Raft entry even when its compare refuses it, and
  a read is not. A semaphore's waiter (and a reader) reads its rank first (a permit: the
  ``limit`` oldest keys, whose weights ahead of its own and its own must fit the limit; a
  reader: counts the write keys created before its own), then sends the same move, guarded
  by the key's creation revision alone. The queue lease, now without a key, becomes a
  spare. A permit's waiter that gives up after an answered step deletes its key (compared
  on its creation revision) and keeps both leases.

Why a grant from the queue may read, then write, where the first try may not: the keys that
block a waiter are all older than its own, and no key older than it can appear any more (a
new key gets a higher revision), so once none is left, none comes back (a permit's: once the
weights ahead fit, they only shrink, as a key's weight never changes); the move only has to
find our own key still there, created at the same revision. A reader cannot put the rule in
its compare, as a writer does: a compare on an empty range compares a missing key, whose
creation revision 0 is below every revision.

- **Granted at the head** (a plain lock's waiter: no election value, a ttl at least its queue
  lease's ``QUEUE_TTL``): it learns that it is first without a write. Its wait watches puts
  and deletes of the key just ahead (``AsyncGateway.watch_turn``), whose record every read
  of it carries: a record not marked queued is written only by a grant, which had no older
  key, so once such a key is deleted nothing is ahead (no request at all). A deletion of a
  key not known granted (a waiter that gave up, whose older keys may remain), an error or a
  quiet timeout are followed by one linearizable range read of its own key and the newest
  key older than it; a missed or repeated event only delays. No key ahead and its own
  key still at its creation revision: no key
  older than it can ever appear (a new key gets a higher revision; a reused slot, a place
  that lapsed and joined again, come back newer), and every other contender, first try or
  waiter, is refused while its key lives (a lock's first try needs an empty range, a waiter
  no older key). So the name is ours from that read on, for as long as the key lives, which
  is on its queue lease until the move lands: at least ``Lease.refreshed`` (stamped before
  the send of the grant or keep-alive that last restarted that lease's clock) plus the
  lease's length, by the server's clock, which starts later. If that came within
  ``GRANT_UNWRITTEN`` of the lease's length after it (the wait returns before that budget
  runs out), the waiter returns the grant at once
  and sends, not waited for (``AsyncEtcdBackend.move_soon``), ONE transaction: if the key
  is still the one it queued (its creation revision), it moves onto the holder lease (kept
  alive with the queue lease while waiting) with the holder record, and the fence is
  recorded (``fence_at``: never below a later one). Until its answer comes, ``check()``
  doubts the lease (``lease_doubt``) once ``SESSION_TRUST`` of the queue lease's length has
  passed since ``Lease.refreshed``; release, renewal, ``owned`` and ``set_value`` wait for
  the answer first (``_grant_stands``; a release then deletes as usual). A move that finds
  the key gone (its queue lease lapsed: the waiter stalled; or a break, which revokes a
  lock's oldest key still marked queued) loses the lease: the doubt listeners hear of it
  (``on_lost``), ``owned``/``check``/``release`` say so; a move that failed (no answer) may
  have landed, so the release still deletes the key, guarded by its creation revision.
  Meanwhile ``inspect`` shows no holder (the key is still marked queued) and the previous
  holder's fence; once the move lands, this holder and its fence. Its fence is the key's
  creation revision, known at the read: the holder before it had its key older than ours
  (else it could not have been granted while ours lived: its grant needed no older key, or
  an empty range) and any holder after it is granted only once our key is gone, which our
  release does only after the move landed. A waiter with a shorter ttl, an election value,
  a read-write lock's writer and a permit take the grant by the move itself, as below: a
  ttl below the queue lease's would let a holder dead before its move hold the name for
  the queue lease's 2 s, longer than its ttl (``lease_overrun``); an election value's
  record must be the holder's before anyone reads it as the leader's; the writer and the
  permit kept the path they had (their rule is in the move's compare or read beside it).

Why a grant at the head, rather than a release that hands the key on (a handoff is now the
release's delete, one read and nothing the next holder waits for, where etcd's lock service,
whose server answers the blocked ``lock`` call at the release, needs the delete alone):
while it waits, a waiter's key must be on a lease that ends within its ``queue_ttl`` of its
last keep-alive (a dead waiter leaves the queue that soon), and once granted on one that
lasts ``ttl`` from the grant without any (a paused holder keeps the name for its ttl). The
server cannot tell a dead waiter from a paused one, and an etcd lease's TTL is fixed at its
grant (a keep-alive restarts it, never changes it), so no key can be both before the waiter
has said a word after its turn came; the word that moves it is a write, and the waiter need
not wait for it, as its key on the queue lease already holds the name for a known while. A
release that moved its successor's key onto the successor's own ttl lease would let a waiter
that died less than ``queue_ttl`` before hold the name for a whole ttl.
"""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING

from tenure._async.ordered_attempt import AsyncOrderedAttempt
from tenure._errors import limit_mismatch
from tenure._types import Busy, Grant, Kind, Mode
from tenure.backends.etcd._answer import Answer
from tenure.backends.etcd._async.first_try import (
    GRANT_UNWRITTEN,
    SESSION_TRUST,
    Held,
    QueuePlace,
    first_try,
)
from tenure.backends.etcd._async.pool import Lease, lease_seconds
from tenure.backends.etcd._errors import NotFound
from tenure.backends.etcd._keys import Record, b64, name_prefix, prefix_end, unb64
from tenure.backends.etcd._records import fits
from tenure.backends.etcd._statements import (
    JSON,
    blocking,
    created_at,
    fence_at,
    kvs,
    newest_before,
    none_before,
    oldest,
    put,
    revision,
)

if TYPE_CHECKING:
    from tenure.backends.etcd._async.store import AsyncEtcdBackend

__all__ = ["AsyncEtcdAttempt"]


class AsyncEtcdAttempt(AsyncOrderedAttempt[QueuePlace]):
    """One acquire call's tries: the first writes (or refuses, leaving a place ready), the
    waits queue and watch, the later ones settle the place (module docstring)."""

    store: AsyncEtcdBackend

    answered: bool = False
    """The last step (a try, a wait) of a queued permit's waiter came back refused or done:
    its place is as this attempt knows it (queued on ``place.lease``), so giving up is one
    delete (``leave``); after a step that raised (a grant whose answer was lost?) giving up
    looks the key up and revokes whatever lease it is on."""

    async def try_once(self) -> Grant | Busy:
        self.answered = False
        outcome = await self._try_once()
        self.answered = isinstance(outcome, Busy)
        return outcome

    async def wait(self, timeout: float, busy: Busy) -> None:
        self.answered = False
        await super().wait(timeout, busy)
        self.answered = True

    async def leave(self) -> None:
        place = self.place
        if not (self.answered and self.spec.kind == Kind.SEMAPHORE and place is not None
                and place.revision and place.lease is not None):
            await super().leave()
            return
        # Our queued key, if still the one we placed, goes; both leases stay spares.
        spares = (place.lease, place.holder_lease)
        place.lease = place.holder_lease = None
        store = self.store
        await store.gateway.post("/v3/kv/txn", {
            "compare": [created_at(place.key, place.revision)],
            "success": [{"request_delete_range": {"key": b64(place.key)}}],
        })
        place.revision = 0
        for spare in spares:
            if spare is not None:
                await store.pool.keep_spare(spare)

    async def _try_once(self) -> Grant | Busy:
        place = self.place
        if place is not None and place.revision:
            outcome = await self._settle(place)
        else:
            kept = None
            if place is not None:  # a place that lapsed: its holder lease is still ready
                kept, place.holder_lease = place.holder_lease, None
            outcome = await first_try(
                self.store, self.name, self.spec, token=self.token, ttl=self.ttl,
                holder=self.holder, kept=kept,
            )
        if isinstance(outcome, QueuePlace):
            self.place = outcome
            return Busy(None)
        return outcome

    async def wait_unplaced(self, timeout: float) -> None:
        await self.store.watch_name(self.spec.kind, self.name, timeout)

    # ---- the steps of a queued waiter ------------------------------------------------------

    def _prefix(self, place: QueuePlace) -> str:
        return name_prefix(self.store.settings.namespace, place.kind, place.name)

    async def _settle(self, place: QueuePlace) -> Grant | QueuePlace:
        """A queued waiter's try: granted once its key is among the ``limit`` oldest (a
        semaphore's: once the weights of the keys ahead and its own fit the limit)."""
        prefix = self._prefix(place)
        if place.mode is not None:
            return await self._settle_in_turn(place, place.mode)
        if place.limit == 1:
            return await self._take_in_turn(place, prefix)
        answer = await self.store.gateway.post(
            "/v3/kv/range", oldest(prefix, place.limit)["request_range"]
        )
        ranked = kvs(answer)
        # Deletions up to this read are reflected in it: the next watch starts after it.
        place.watch_from = revision(answer) + 1
        at = next((i for i, kv in enumerate(ranked) if unb64(kv["key"]).decode() == place.key),
                  None)
        if at is None:
            return place
        mine = ranked[at]
        if int(mine["create_revision"]) != place.revision:
            place.revision = 0  # our place lapsed and the key was written again: rejoin
            return place
        conflict = next(
            (record.limit for kv in ranked if kv is not mine
             and (record := Record.decode(kv.get("value", ""))).limit != place.limit),
            None,
        )
        if conflict is not None:
            await self.leave_place(place)
            raise limit_mismatch(place.name, conflict, place.limit)
        # The weighted FIFO rule: the weights of every key ahead (permits and places) and
        # ours within the limit (every weight 1: among the ``limit`` oldest).
        if not fits(place.limit, [Record.decode(kv.get("value", "")).weight
                                  for kv in ranked[:at]] + [place.weight])[-1]:
            return place
        return await self._take(place, None)

    async def _settle_in_turn(self, place: QueuePlace, mode: str) -> Grant | QueuePlace:
        """A read-write lock's waiter: granted once no key that blocks it is older."""
        ahead_in = blocking(self._prefix(place), mode)
        if mode == Mode.WRITE:
            # Its own key is in the range, as a lock's waiter's.
            return await self._take_in_turn(place, ahead_in)
        if not await self._look_ahead(place, ahead_in, {"key": b64(place.key)}):
            return place
        return await self._take(place, None)

    async def _take_in_turn(self, place: QueuePlace, ahead_in: str) -> Grant | QueuePlace:
        """A lock's waiter (or a writer's): the grant's transaction at once after a wait
        that may have seen the key ahead go; after a quiet timeout, a read first (every wait
        is followed by a fresh look, as watches can miss events, but a read is not a Raft
        write, as even a refused transaction with writes is)."""
        if self._holds_at_head(place):
            # The last wait saw the last key ahead go, or a read tells (never a write) that
            # we are first (module docstring, "Granted at the head"): then the grant goes
            # out without waiting for its answer.
            at_head, place.at_head = place.at_head, False
            if not at_head and not await self._look_ahead(
                place, ahead_in, {"key": b64(place.key), "keys_only": True}
            ):
                return place
            assert place.lease is not None
            if time.monotonic() < place.lease.refreshed + place.lease.seconds * GRANT_UNWRITTEN:
                return await self._grant_at_head(place)
            return await self._take(place, ahead_in)
        if not place.woken and not await self._look_ahead(
            place, ahead_in, {"key": b64(place.key), "keys_only": True}
        ):
            return place
        return await self._take(place, ahead_in)

    def _holds_at_head(self, place: QueuePlace) -> bool:
        """Whether this waiter takes its grant at the head of the queue without waiting for
        the move's answer: a plain lock's (no election value), with a ttl of at least its
        queue lease's (module docstring, "Granted at the head")."""
        return (place.kind == Kind.LOCK and place.limit == 1 and place.mode is None
                and place.value is None and self.ttl >= place.queue_seconds
                and place.lease is not None)

    async def _holding(self, place: QueuePlace) -> tuple[Lease, Record]:
        """What a grant from the queue holds the name on: the holder lease (the one granted
        ahead by the first try, if it still lasts the ttl; it is ours now, no longer the
        place's) and our record as holder."""
        lease = await self.store.pool.lasting(
            lease_seconds(self.ttl), self.ttl, place.holder_lease
        )
        place.holder_lease = None
        record = Record.new(self.holder, place.limit, value=place.value, ttl=self.ttl,
                            fair=self.spec.fair, weight=place.weight)
        return lease, record

    async def _grant_at_head(self, place: QueuePlace) -> Grant:
        """Our key heads the queue (its wait saw the granted key ahead go, or a read found
        nothing older), on a queue lease that lasts at
        least ``GRANT_UNWRITTEN`` of its length longer: the grant is ours now. The move onto
        our holder lease (guarded by the key's creation revision) and the fence's record go
        out in one transaction, not waited for (``AsyncEtcdBackend.move_soon``)."""
        assert place.lease is not None
        store = self.store
        lease, record = await self._holding(place)
        slot = store.slots.get(Kind.LOCK, place.name, self.token)
        fence_lease: str | None = None
        fence_kept_until = math.inf
        if slot is not None:
            fence_lease, fence_kept_until = await store.fence_lease()
        queue_lease, place.lease = place.lease, None
        held = Held(place.key, lease, place.revision, record, fence_kept_until,
                    granting=Answer(),
                    grant_unanswered_after=(
                        queue_lease.refreshed + queue_lease.seconds * SESSION_TRUST))
        store.remember(place.kind, place.name, self.token, held)
        store.move_soon(place.name, held, queue_lease, fence_lease, slot)
        return Grant(place.revision)

    async def _look_ahead(self, place: QueuePlace, ahead_in: str, mine: JSON) -> bool:
        """Read our key (``mine``: its range request) and the newest key of ``ahead_in``
        older than it, in one read: True when nothing is ahead; else False, the place
        marked lapsed (join again at the back) or holding the key to watch."""
        before = self._newest_before(place, ahead_in)
        answer = await self.store.gateway.post("/v3/kv/txn", {"success": [
            {"request_range": mine},
            # Not count_only: etcd counts the whole range, before the revision filter.
            before,
        ]})
        ours, ahead = (kvs(response) for response in answer["responses"])
        place.watch_from = revision(answer) + 1
        if not ours or int(ours[0]["create_revision"]) != place.revision:
            place.revision = 0  # our place lapsed: join again at the back
            return False
        if ahead:
            place.predecessor, place.predecessor_known = ahead[0]["key"], True
            place.predecessor_created = int(ahead[0]["create_revision"])
            place.predecessor_granted = _granted(ahead[0])
            return False
        return True

    async def _take(self, place: QueuePlace, ahead_in: str | None) -> Grant | QueuePlace:
        """Move our key onto our holder lease, if it is still the key we queued and, with
        ``ahead_in`` (a range holding our key), no key of that range is older: then it is
        our turn, judged in the step that grants it. Refused: our key and the key just
        ahead, read in the same step, for the next wait."""
        assert place.lease is not None
        store = self.store
        lease, record = await self._holding(place)
        compare = [created_at(place.key, place.revision)]
        failure: list[JSON] = [{"request_range": {"key": b64(place.key)}}]
        if ahead_in is not None:
            compare.append(none_before(ahead_in, place.revision))
            failure.append(newest_before(ahead_in, place.revision))
        fence_key = store.fence_key(place.kind, place.name)
        # A lock's fence key goes on the gc_after lease (its release then only deletes the
        # key: ``_release_lock``); any other kind's on the holder's lease (``_statements``).
        slot = store.slots.get(Kind.LOCK, place.name, self.token) if (
            place.kind == Kind.LOCK) else None
        fence_lease: str | None = None
        fence_kept_until = math.inf
        if slot is not None:
            fence_lease, fence_kept_until = await store.fence_lease()

        def move(lease: Lease) -> JSON:
            return {
                "compare": compare,
                "success": [
                    put(place.key, record.encode(), lease.id),
                    fence_at(fence_key, place.revision, lease.id if slot is None else fence_lease),
                ],
                "failure": failure,
            }

        try:
            answer, lease = await store.pool.on_lease(move, lease, track=slot)
        except NotFound:
            if slot is None:
                raise
            store.drop_fence_lease()  # the gc_after lease ended before use: a new one
            fence_lease, fence_kept_until = await store.fence_lease()
            answer, lease = await store.pool.on_lease(move, lease, track=slot)
        if not answer.get("succeeded"):
            place.holder_lease = lease
            mine = kvs(answer["responses"][0])
            if not mine or int(mine[0]["create_revision"]) != place.revision:
                place.revision = 0  # our queue lease lapsed (a stalled waiter): rejoin
                return place
            place.watch_from = revision(answer) + 1
            if ahead_in is not None:
                ahead = kvs(answer["responses"][1])
                place.predecessor = ahead[0]["key"] if ahead else None
                place.predecessor_created = int(ahead[0]["create_revision"]) if ahead else None
                place.predecessor_granted = False  # keys only: not known
                place.predecessor_known = True
            return place
        await store.pool.keep_spare(place.lease)  # the key left it; nothing else is on it
        place.lease = None
        store.remember(place.kind, place.name, self.token,
                       Held(place.key, lease, place.revision, record, fence_kept_until))
        return Grant(place.revision)

    async def wait_in_place(self, place: QueuePlace, timeout: float) -> None:
        store = self.store
        prefix = self._prefix(place)
        # One request keeps our place and the lease we will hold the name on alive: the
        # grant that may follow this wait then needs no lease request.
        leases = [lease for lease in (place.lease if place.revision else None,
                                      place.holder_lease) if lease is not None]
        alive = dict(zip((lease.id for lease in leases), await store.pool.refresh(leases),
                         strict=True)) if leases else {}
        if place.holder_lease is not None and not alive[place.holder_lease.id]:
            place.holder_lease = None  # ended (a break of a spare?): the grant gets another
        if place.revision and place.lease is not None and not alive[place.lease.id]:
            place.revision = 0  # lapsed while we were away: join again
        if not place.revision:
            await self._join(place)
        if place.limit > 1:
            place.woken = await store.gateway.watch_deletes(
                b64(prefix), b64(prefix_end(prefix)), place.watch_from, timeout
            )
            return
        if place.mode is not None:
            prefix = blocking(prefix, place.mode)  # a reader watches the newest write ahead
        if not place.predecessor_known:
            ahead = await store.gateway.post(
                "/v3/kv/range", self._newest_before(place, prefix)["request_range"]
            )
            predecessor = kvs(ahead)
            place.predecessor = predecessor[0]["key"] if predecessor else None
            place.predecessor_created = (
                int(predecessor[0]["create_revision"]) if predecessor else None)
            place.predecessor_granted = bool(predecessor) and _granted(predecessor[0])
            place.watch_from = revision(ahead) + 1
        place.predecessor_known = False  # the next wait reads again, unless a step did
        place.woken = True  # nothing ahead: our turn, unless the step finds otherwise
        if place.predecessor is not None and self._holds_at_head(place):
            assert place.predecessor_created is not None and place.lease is not None
            # Back (and the queue lease kept alive) before a turn seen would come too late
            # to be taken at the head (``GRANT_UNWRITTEN``).
            budget = (place.lease.refreshed + place.lease.seconds * GRANT_UNWRITTEN
                      - time.monotonic() - 0.05)
            outcome = await store.gateway.watch_turn(
                place.predecessor, place.watch_from, max(0.01, min(timeout, budget)),
                created=place.predecessor_created, granted=place.predecessor_granted,
            )
            place.at_head, place.woken = outcome == "head", outcome != "quiet"
        elif place.predecessor is not None:
            place.woken = await store.gateway.watch_deletes(
                place.predecessor, None, place.watch_from, timeout, place.predecessor_created
            )

    def _newest_before(self, place: QueuePlace, ahead_in: str) -> JSON:
        """The read of the key just ahead: with its record for a lock's waiter granted at
        the head, which then knows whether that key held the lock (``predecessor_granted``)."""
        before = newest_before(ahead_in, place.revision)
        if self._holds_at_head(place):
            del before["request_range"]["keys_only"]
        return before

    async def leave_place(self, place: QueuePlace) -> None:
        """Give up a place: the queue key goes with its lease; the holder lease stays ours."""
        lease, place.holder_lease = place.holder_lease, None
        if place.revision and place.lease is not None:
            place.revision = 0
            await self.store.pool.revoke(place.lease.id)
        if place.kind == Kind.LOCK:
            self.store.slots.free(place.kind, place.name, self.token)  # its key went
        if lease is not None:
            await self.store.pool.keep_spare(lease)

    async def _join(self, place: QueuePlace) -> None:
        """Write the waiter's key at the back of the queue, on a short queue lease, and read
        the key just ahead of it in the same step."""
        pool = self.store.pool
        slot = None
        if place.kind == Kind.LOCK:
            # The key this client writes under the name for this acquisition (``_slots``):
            # claimed again, as a refused first try let it go.
            slot = self.store.lock_slot(place.name, self.token)
            place.key = slot.key
        place.lease = await pool.lasting(place.queue_seconds, place.queue_seconds / 2)
        prefix = self._prefix(place)
        if place.mode is not None:
            prefix = blocking(prefix, place.mode)
        newest = oldest(prefix, 2)
        newest["request_range"] |= {"sort_order": "DESCEND"}
        if not self._holds_at_head(place):  # else the records: was the key ahead granted?
            newest["request_range"]["keys_only"] = True

        def join(lease: Lease) -> JSON:
            return {"success": [
                put(place.key, place.record, lease.id),
                {"request_range": {"key": b64(place.key)}},
                newest,
            ]}

        answer, place.lease = await pool.on_lease(join, place.lease, track=slot)
        (mine,) = kvs(answer["responses"][1])
        place.revision = int(mine["create_revision"])
        place.watch_from = revision(answer) + 1
        # The newest key other than ours is the one just ahead when ours is the newest, as
        # a new key is; a key of ours that outlived its lapsed place keeps its old creation
        # revision, and then the wait reads the key ahead itself.
        others = [kv for kv in kvs(answer["responses"][2]) if kv["key"] != mine["key"]]
        place.predecessor_known = not others or int(others[0]["create_revision"]) < place.revision
        place.predecessor = others[0]["key"] if others and place.predecessor_known else None
        place.predecessor_created = (
            int(others[0]["create_revision"]) if others and place.predecessor_known else None)
        place.predecessor_granted = place.predecessor is not None and _granted(others[0])


def _granted(kv: JSON) -> bool:
    """Whether a lock's key read with its record held the lock: only a grant writes a record
    not marked queued, and a grant had no older key (none can appear again)."""
    return "value" in kv and not Record.decode(kv["value"]).queued
