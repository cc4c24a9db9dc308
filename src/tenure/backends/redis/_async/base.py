"""What every Redis step needs: the settings, the key namespace, the transport and the wait
budget, built once per store; renewals batched per slot and listings by SCAN, for every kind
alike."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Self

from tenure._async.store import WITH_WEIGHTS, AsyncStore
from tenure._types import Capabilities, LockInfo, Renewal
from tenure.backends.redis import SCHEMES
from tenure.backends.redis._async.transport import AsyncTransport, ScriptCall, open_transport
from tenure.backends.redis._config import RedisSettings
from tenure.backends.redis._errors import DRIVER_ERRORS
from tenure.backends.redis._scripts import Script, milliseconds
from tenure.backends.redis._waiting import Contention, WaitBudget

__all__ = ["AsyncRedisBase"]


class AsyncRedisBase(AsyncStore):
    """The state the lock steps (``locks``), the permit steps (``semaphores``) and the queued
    steps (``rwlocks``) share."""

    schemes = SCHEMES
    capabilities = Capabilities(
        fencing="strictly increasing per name, and never going back: each is at least the "
        "server's clock in microseconds, so also across a restart without persistence, a "
        "Sentinel failover and the clean-up of a name idle for gc_after (10 minutes by default)",
        fences_survive_restart=True,
        fences_count_per_name=False,
        leases_survive_restart=False,
        wakeups="notification",
        multi_host=True,
        fault_tolerant=False,
    )
    offers = WITH_WEIGHTS
    driver_errors = DRIVER_ERRORS
    max_backoff = 0.5
    notifies = True
    """Releases wake waiters, so a waiter's timed pause only bounds how long an expiry without
    a release (a crashed holder) or a lost wake-up goes unnoticed."""

    def __init__(self, settings: RedisSettings) -> None:
        self.settings = settings
        self._namespace = settings.namespace
        self._gc_after_ms = settings.gc_after_ms
        self._waits = WaitBudget(settings, self.max_backoff)
        self._contended = Contention()
        self._transport: AsyncTransport = open_transport(settings)

    @property
    def setup_seconds(self) -> float:
        return self._transport.setup.seconds

    def describe(self) -> str:
        return self.settings.display

    def renewal_store(self) -> Self:
        # redis-py's asyncio connections belong to the loop that opened them.
        return type(self)(self.settings)

    async def aclose(self) -> None:
        await self._transport.aclose()

    async def _renew_by_slot(
        self, leases: Sequence[tuple[Script, Sequence[str], Renewal]]
    ) -> list[bool]:
        """Renew many leases, each given as its kind's extend script (KEYS the keys of each
        lease in turn, ARGV gc_after ms then each lease's token and ttl ms; one 1/0 reply per
        lease), its keys and its renewal. One script call per script and Cluster slot (on one
        master: one per script), all of them in one round trip per node."""
        groups: dict[tuple[str, int], list[int]] = {}
        for index, (script, keys, _) in enumerate(leases):
            groups.setdefault((script.name, self._transport.slot(keys[0])), []).append(index)
        calls: list[ScriptCall] = []
        for indexes in groups.values():
            key_list: list[str] = []
            arguments: list[Any] = [self._gc_after_ms]
            for index in indexes:
                _, keys, renewal = leases[index]
                key_list += keys
                arguments += [renewal.token, milliseconds(renewal.ttl)]
            calls.append((leases[indexes[0]][0], key_list, arguments))
        replies = await self._transport.scripts(calls)
        results = [False] * len(leases)
        for indexes, reply in zip(groups.values(), replies, strict=True):
            for index, extended in zip(indexes, reply, strict=True):
                results[index] = extended == 1
        return results

    async def _listed(
        self, pattern: str, inspect: Callable[[str], ScriptCall | None],
        decode: Callable[[Any], LockInfo | None], prefix: str,
    ) -> list[LockInfo]:
        """Every record whose meta key matches ``pattern`` (SCAN, page by page, each page's
        records read in one round trip by ``inspect(meta)``; None: not such a record) and
        whose name starts with ``prefix``, by name."""
        found: list[LockInfo] = []
        for page in await self._transport.scan(pattern):
            metas = [key.decode() if isinstance(key, bytes) else key for key in page]
            calls = [call for call in map(inspect, metas) if call is not None]
            for reply in await self._transport.scripts(calls):
                info = decode(reply)
                if info is not None and info.name.startswith(prefix):
                    found.append(info)
        return sorted(found, key=lambda info: info.name)
