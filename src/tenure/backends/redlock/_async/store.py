"""The Redlock backend for asyncio: ``redlock://host:port,host:port,host:port[,...]``.

Every operation runs the single-node Redis backend's Lua script (``tenure.backends.redis.
_scripts``) on every node at once, over that backend's connections (one pool per node), and
counts the answers (``_quorum``):

- acquire: granted only by a majority, with a positive validity (``ttl - elapsed``: each node
  is asked for a lease longer by the clock-drift allowance, see ``_quorum``), and with the
  fence floored on that majority (``_scripts``). Any failure releases on every node, those
  that did not answer included, then reports ``Busy`` (the lock logic backs off with jitter,
  bounded by the lease of the majority's holder) or, when fewer than a majority of nodes
  answered, raises BackendError.
- extend (and the watchdog's batched renewals): a majority must still hold the token and the
  validity must be positive; a majority that can no longer be reached is an error (the
  watchdog retries until the lease's end), one that said no is a loss.
- release, break: on every node. Release is True when a majority had our live lease.
- release inside a ``hold_at_least`` window: an extend on every node to the window's end,
  True when a majority had our lease (no validity to vouch for: nobody holds it any more).

Node timeouts are short (0.2 s by default, see ``_config``): every call waits for all nodes,
so a dead node slows each operation by at most that much and never hangs one.

Nodes that refuse us, and the fan-out: ``nodes``. Errors: ``_errors``.
"""

from __future__ import annotations

import random
import time
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, NoReturn

from tenure._async.store import AsyncStore
from tenure._concurrency import async_io as io
from tenure._types import Busy, Capabilities, Grant, Holder, Kind, LeaseSpec, LockInfo, Renewal
from tenure.backends.redis._errors import digest_collision
from tenure.backends.redis._records import decode_info
from tenure.backends.redis._scripts import (
    ACQUIRE,
    BREAK,
    EXTEND,
    INSPECT,
    LockKeys,
    lock_keys,
    meta_pattern,
    milliseconds,
)
from tenure.backends.redlock import SCHEMES
from tenure.backends.redlock._async.nodes import AsyncNodes
from tenure.backends.redlock._config import RedlockSettings, parse
from tenure.backends.redlock._errors import DRIVER_ERRORS, no_quorum
from tenure.backends.redlock._quorum import (
    Verdict,
    busy_ttl_left,
    combine_infos,
    node_ttl,
    quorum,
    reachable_quorum,
    validity,
    verdict,
)
from tenure.backends.redlock._scripts import FENCE_FLOOR

__all__ = ["AsyncRedlockBackend"]

SPLIT_VOTE_BUDGET = 0.5
"""Seconds one acquire may spend resolving split votes before it reports Busy(None)."""
SPLIT_VOTE_FIRST_PAUSE = 0.002
SPLIT_VOTE_LONGEST_PAUSE = 0.05
"""Pauses between split-vote retries: doubling, each drawn from the upper half of its step."""


class AsyncRedlockBackend(AsyncStore):
    """Locks only (the kind is always ``Kind.LOCK``: ``refusals`` says why not the others).
    Options: see ``_config`` (every Redis option, for all nodes or per node, plus
    ``clock_drift_rate`` and ``clock_drift_margin``)."""

    schemes = SCHEMES
    offers = frozenset({"lock"})
    driver_errors = DRIVER_ERRORS
    capabilities = Capabilities(
        fencing="per name, the largest of a majority's counters, floored on that majority: "
        "greater than every fence granted before, while no node loses its data (AOF "
        "appendfsync always) and no node's clock jumps; not one global sequence",
        fences_survive_restart=False,
        leases_survive_restart=False,
        wakeups="back-off",
        multi_host=True,
        fault_tolerant=True,
        fences_count_per_name=False,
    )
    refusals: ClassVar[Mapping[str, str]] = {
        "semaphore": (
            "counting permits on each independent node and taking a majority is not safe "
            "(3 nodes, limit 2: holders granted on nodes {1,2}, {2,3} and {1,3} all win, three "
            "permits of two), and one Redlock per permit slot would give fences that do not "
            "increase per name; use redis://, a SQL backend, MongoDB, or a consensus store "
            "(etcd://, zookeeper://) for semaphores"
        ),
        "election": (
            "a leader's value would live on each independent node: a majority lock can be "
            "won while a minority still holds the previous leader's record, a proclaim that "
            "reaches some nodes and not others leaves nodes disagreeing with no atomic read "
            "of holder, term and value across them, and Redlock's fences are not one "
            "counter per name, so terms could not be compared; use redis://, a SQL backend, "
            "MongoDB, or a consensus store (etcd://, zookeeper://) for elections"
        ),
        "fair": (
            "independent nodes order waiters differently: no single arrival order exists, "
            "so no node's queue can say whose turn it is; use redis://, a SQL backend, "
            "MongoDB, or a consensus store (etcd://, zookeeper://) for fair locks"
        ),
        "rwlock": (
            "a majority of per-node checks would keep readers and writers apart, but the "
            "queue that stops a stream of readers from starving a writer needs one arrival "
            "order, which independent nodes do not have, and a write's fence must exceed "
            "every earlier read fence of the name, which per-node counters cannot promise; "
            "use redis://, a SQL backend, MongoDB, or a consensus store (etcd://, "
            "zookeeper://) for read-write locks"
        ),
    }
    max_backoff = 0.1
    """No notifications across independent nodes: waiters retry with jittered, doubling
    pauses up to this long (and never past the majority holder's remaining lease)."""

    def __init__(self, settings: RedlockSettings) -> None:
        self.settings = settings
        self._namespace = settings.namespace
        self._nodes = AsyncNodes(settings)
        self._count = self._nodes.count
        self._quorum = quorum(self._count)
        self._clock = time.monotonic
        gc_after = settings.gc_after
        self._gc_after_ms = 0 if gc_after is None else max(1, round(gc_after * 1000))
        """``gc_after`` for the scripts: whole milliseconds, 0 for forever."""

    @classmethod
    def from_url(cls, url: str, **options: Any) -> AsyncRedlockBackend:
        return cls(parse(url, options))

    def describe(self) -> str:
        return self.settings.display

    def renewal_store(self) -> AsyncRedlockBackend:
        # redis-py's asyncio connections belong to the loop that opened them.
        return type(self)(self.settings)

    def _unreachable(self, action: str, subject: str, failures: list[Exception]) -> NoReturn:
        raise no_quorum(
            self.describe(), action, subject, failures, count=self._count, quorum=self._quorum
        ) from failures[0]

    def _combine(self, infos: Sequence[LockInfo | None]) -> LockInfo | None:
        return combine_infos(
            infos, self._count, self.settings.drift_rate, self.settings.drift_margin
        )

    def _node_ms(self, ttl: float) -> int:
        return milliseconds(node_ttl(ttl, self.settings.drift_rate, self.settings.drift_margin))

    # ---- the verbs -----------------------------------------------------------------------

    async def acquire(
        self, name: str, spec: LeaseSpec, token: str, ttl: float, holder: Holder
    ) -> Grant | Busy:
        """One Redlock attempt; on a split vote (contenders starting together each took
        some nodes, none a majority, and nobody holds one), release and try again after a
        random pause, for up to SPLIT_VOTE_BUDGET: a free lock is then taken by exactly one
        of them, even by non-blocking tries. Busy means a majority is held by someone else."""
        deadline = self._clock() + SPLIT_VOTE_BUDGET
        step = SPLIT_VOTE_FIRST_PAUSE
        while True:
            outcome = await self._vote(name, token, ttl, holder)
            if outcome is not None:
                return outcome
            pause = step / 2 + random.uniform(0, step / 2)
            if self._clock() + pause >= deadline:
                return Busy(None)
            await io.sleep(pause)
            step = min(step * 2, SPLIT_VOTE_LONGEST_PAUSE)

    async def _vote(
        self, name: str, token: str, ttl: float, holder: Holder
    ) -> Grant | Busy | None:
        """Grant, Busy, or None for a split vote (see ``acquire``)."""
        keys = lock_keys(self._namespace, name)
        script_keys = (keys.meta, keys.lease, keys.wake, keys.left(token))
        # No value; each node keeps the record gc_after past the lease; fences a plain
        # counter per node, floored at the node's clock only where the name has no record
        # (new, or removed by gc_after): the fence floor below orders them (see _scripts).
        arguments = (
            token, self._node_ms(ttl), name, holder.host, holder.pid, holder.thread,
            "0", "0", "", self._gc_after_ms, "2",
        )
        started = self._clock()
        replies = await self._nodes.each(
            lambda node: node.script(ACQUIRE, script_keys, arguments)
        )
        refusal = self._nodes.refusal("acquire", range(self._count), replies)
        if refusal is not None:
            # The other nodes may have granted: undo that before refusing.
            await self._nodes.release_everywhere(keys, token)
            raise refusal
        granted: dict[int, int] = {}
        busy: dict[int, float | None] = {}
        failures: list[Exception] = []
        collision: Any = None
        for index, reply in enumerate(replies):
            if isinstance(reply, Exception):
                failures.append(reply)
            elif reply[0] == 1:
                granted[index] = int(reply[1])
            elif reply[0] == 0:
                left = int(reply[1])
                busy[index] = None if left < 0 else left / 1000
            else:
                collision = reply[1]

        if len(granted) >= self._quorum and collision is None:
            fence = max(granted.values())
            holding = [index for index, node_fence in granted.items() if node_fence == fence]
            behind = [index for index, node_fence in granted.items() if node_fence < fence]
            if behind:
                floors = await self._nodes.each(
                    lambda node: node.script(FENCE_FLOOR, (keys.meta, keys.lease), (token, fence)),
                    behind,
                )
                holding += [index for index, reply in zip(behind, floors, strict=True)
                            if not isinstance(reply, Exception) and reply == 1]
            if len(holding) >= self._quorum and validity(ttl, self._clock() - started) > 0:
                return Grant(fence)

        # No grant: undo it everywhere, the nodes that did not answer included (their grant
        # may have landed, its reply lost).
        await self._nodes.release_everywhere(keys, token)
        if collision is not None:
            raise digest_collision("lock", name, collision)
        if not reachable_quorum(len(failures), self._count):
            self._unreachable("acquire", repr(name), failures)
        if len(granted) >= self._quorum:
            return Busy(None)  # granted too slowly (no validity left), or the floor failed
        ttl_left = busy_ttl_left(len(granted), busy.values(), self._count)
        if await self._majority_held(keys, list(busy), len(failures)):
            return Busy(ttl_left)
        return None

    async def _majority_held(self, keys: LockKeys, busy: list[int], failed: int) -> bool:
        """Whether one token (another owner) may hold a majority: the busy nodes' holders,
        looked up after our own grants were released. Unanswered nodes count as possibly
        held; True when in doubt."""
        if not busy:
            return failed >= self._quorum
        replies = await self._nodes.each(
            lambda node: node.execute("HGET", keys.lease, "token"), busy
        )
        tokens: dict[Any, int] = {}
        for reply in replies:
            if isinstance(reply, Exception):
                failed += 1
            elif reply is not None:
                tokens[reply] = tokens.get(reply, 0) + 1
        return max(tokens.values(), default=0) + failed >= self._quorum

    async def release(self, kind: Kind, name: str, token: str) -> bool:
        replies = await self._nodes.release_everywhere(lock_keys(self._namespace, name), token)
        self._nodes.warn("release", replies)
        failures = [reply for reply in replies if isinstance(reply, Exception)]
        released = sum(1 for reply in replies if not isinstance(reply, Exception) and reply == 1)
        outcome = verdict(released, len(failures), self._count)
        if outcome is Verdict.UNKNOWN:
            self._unreachable("release", repr(name), failures)
        return outcome is Verdict.YES

    async def extend_many(self, renewals: Sequence[Renewal]) -> list[bool]:
        return await self._extend(renewals, vouched=True)

    async def release_after(self, kind: Kind, name: str, token: str, seconds: float) -> bool:
        # An extend to the window's end, judged by the majority alone: the validity rule
        # vouches for a holder's lease, and nobody holds this one any more (a window
        # shorter than the call would otherwise read as a loss).
        return (await self._extend([Renewal(name, token, seconds, kind)], vouched=False))[0]

    async def _extend(self, renewals: Sequence[Renewal], *, vouched: bool) -> list[bool]:
        """Each lease's expiry on every node reset to its ttl (``node_ttl``) from now; True
        where a majority had it (``vouched``: and its validity is still positive)."""
        if not renewals:
            return []
        leases: list[str] = []
        arguments: list[Any] = [self._gc_after_ms]
        for renewal in renewals:
            keys = lock_keys(self._namespace, renewal.name)
            leases += [keys.meta, keys.lease]
            arguments += [renewal.token, self._node_ms(renewal.ttl)]
        started = self._clock()
        replies = await self._nodes.each(lambda node: node.script(EXTEND, leases, arguments))
        elapsed = self._clock() - started
        self._nodes.warn("renew", replies)
        failures = [reply for reply in replies if isinstance(reply, Exception)]
        answers = [reply for reply in replies if not isinstance(reply, Exception)]
        results: list[bool] = []
        undecided = False
        for index, renewal in enumerate(renewals):
            extended = sum(1 for reply in answers if reply[index] == 1)
            outcome = verdict(extended, len(failures), self._count)
            results.append(outcome is Verdict.YES and (
                not vouched or validity(renewal.ttl, elapsed) > 0
            ))
            if outcome is Verdict.UNKNOWN:
                # Some nodes said no and too many did not answer to tell: the majority may
                # still be ours (one node whose key expired early, another slow to answer).
                # Releasing here would turn a slow node into a lost lease; raising leaves the
                # keys to their expiry and the watchdog retries until the lease's end.
                undecided = True
            elif not results[-1]:
                # Lost (or renewed too late to vouch for): free the nodes that still have it.
                await self._nodes.release_everywhere(
                    lock_keys(self._namespace, renewal.name), renewal.token
                )
        if undecided:
            more = f" and {len(renewals) - 1} more" if len(renewals) > 1 else ""
            self._unreachable("extend", f"{renewals[0].name!r}{more}", failures)
        return results

    async def owned(self, kind: Kind, name: str, token: str) -> bool:
        lease = lock_keys(self._namespace, name).lease
        replies = await self._nodes.each(
            lambda node: node.execute("HGET", lease, "token"), action="check ownership"
        )
        failures = [reply for reply in replies if isinstance(reply, Exception)]
        ours = sum(1 for reply in replies if reply == token.encode())
        outcome = verdict(ours, len(failures), self._count)
        if outcome is Verdict.UNKNOWN:
            self._unreachable("ownership check", repr(name), failures)
        return outcome is Verdict.YES

    async def inspect(self, kind: Kind, name: str) -> LockInfo | None:
        keys = lock_keys(self._namespace, name)
        replies = await self._nodes.each(
            lambda node: node.script(INSPECT, (keys.meta, keys.lease), ()), action="inspect"
        )
        failures = [reply for reply in replies if isinstance(reply, Exception)]
        if not reachable_quorum(len(failures), self._count):
            self._unreachable("inspect", repr(name), failures)
        infos = [decode_info(reply) for reply in replies if not isinstance(reply, Exception)]
        return self._combine(infos)

    async def list_records(self, kind: Kind, prefix: str) -> list[LockInfo]:
        replies = await self._nodes.records(meta_pattern(self._namespace))
        failures = [reply for reply in replies if isinstance(reply, Exception)]
        if not reachable_quorum(len(failures), self._count):
            self._unreachable("list", f"the names under {prefix!r}", failures)
        per_node = [reply for reply in replies if not isinstance(reply, Exception)]
        names = sorted({name for found in per_node for name in found if name.startswith(prefix)})
        combined = [self._combine([found.get(name) for found in per_node]) for name in names]
        return [info for info in combined if info is not None]

    async def break_leases(self, kind: Kind, name: str) -> bool:
        keys = lock_keys(self._namespace, name)
        replies = await self._nodes.each(
            lambda node: node.script(BREAK, (keys.lease, keys.wake), ()), action="break"
        )
        failures = [reply for reply in replies if isinstance(reply, Exception)]
        if any(not isinstance(reply, Exception) and reply == 1 for reply in replies):
            return True
        if not reachable_quorum(len(failures), self._count):
            self._unreachable("break", repr(name), failures)
        return False

    async def aclose(self) -> None:
        await self._nodes.aclose()
