"""What every Redis step needs: the settings, the key namespace, the transport and the wait
budget, built once per backend; and the translation of driver errors around each step."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Self

from tenure._async.backend import AsyncBackend
from tenure._types import Capabilities, Renewal
from tenure.backends.redis import SCHEMES
from tenure.backends.redis._async.transport import AsyncTransport, ScriptCall, open_transport
from tenure.backends.redis._config import RedisSettings
from tenure.backends.redis._errors import Translated
from tenure.backends.redis._scripts import Script, milliseconds
from tenure.backends.redis._waiting import Contention, WaitBudget

__all__ = ["AsyncRedisBase"]


class AsyncRedisBase(AsyncBackend):
    """The state the lock steps (``locks``) and the permit steps (``semaphores``) share."""

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
    max_backoff = 0.5
    notifies = True
    """Releases wake waiters, so a waiter's timed pause only bounds how long an expiry without
    a release (a crashed holder) or a lost wake-up goes unnoticed."""
    combines_try_and_wait = True  # LockSteps.acquire_or_wait

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

    def _translated(self, action: str, name: str | None = None) -> Translated:
        return Translated(self.settings.display, action, name)

    def renewal_backend(self) -> Self:
        # redis-py's asyncio connections belong to the loop that opened them.
        return type(self)(self.settings)

    async def aclose(self) -> None:
        with self._translated("close"):
            await self._transport.aclose()

    async def _renew_by_slot(
        self, script: Script, renewals: Sequence[Renewal], keys: Sequence[Sequence[str]]
    ) -> list[bool]:
        """Renew many leases with ``script`` (any of the extend scripts: KEYS the keys of each
        lease in turn, ARGV gc_after ms then each lease's token and ttl ms; one 1/0 reply per
        lease), ``keys[i]`` being renewal i's keys. One script call per Cluster slot (on one
        master: one call for all), every call in one round trip to its node."""
        groups: dict[int, list[int]] = {}
        for index, lease_keys in enumerate(keys):
            groups.setdefault(self._transport.slot(lease_keys[0]), []).append(index)
        calls: list[ScriptCall] = []
        for indexes in groups.values():
            key_list: list[str] = []
            arguments: list[Any] = [self._gc_after_ms]
            for index in indexes:
                key_list += keys[index]
                arguments += [renewals[index].token, milliseconds(renewals[index].ttl)]
            calls.append((script, key_list, arguments))
        with self._translated("renew"):
            replies = await self._transport.scripts(calls)
        results = [False] * len(renewals)
        for indexes, reply in zip(groups.values(), replies, strict=True):
            for index, extended in zip(indexes, reply, strict=True):
                results[index] = extended == 1
        return results
