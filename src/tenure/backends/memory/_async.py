"""``memory://`` for asyncio: the store's verbs over this process's server (``_server``), each
one atomic step under its mutex, and an attempt whose wait returns at the next release of the
same name in this process. Options: see ``_config``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tenure._async.store import WITH_WEIGHTS, AsyncAttempt, AsyncStore
from tenure._async.wakeups import wait_for_notice
from tenure._options import DEFAULT_GC_AFTER
from tenure._types import Busy, Capabilities, Grant, Holder, Kind, LeaseSpec, LockInfo, Renewal
from tenure.backends.memory import SCHEMES
from tenure.backends.memory._config import settings_from_url
from tenure.backends.memory._errors import DRIVER_ERRORS
from tenure.backends.memory._server import MemoryServer, server_named, wake_key

__all__ = ["BACKEND", "AsyncMemoryAttempt", "AsyncMemoryBackend"]


class AsyncMemoryAttempt(AsyncAttempt):
    """The polling attempt, whose wait also returns at the next release (or lapse) of the
    same kind and name in this process."""

    store: AsyncMemoryBackend

    async def wait(self, timeout: float, busy: Busy) -> None:
        key = wake_key(self.spec.kind, self.name)
        await wait_for_notice(self.store.server.waiters, key, self.before_place_lapses(timeout))


class AsyncMemoryBackend(AsyncStore):
    attempt_class = AsyncMemoryAttempt
    schemes = SCHEMES
    offers = WITH_WEIGHTS
    driver_errors = DRIVER_ERRORS
    local = True
    capabilities = Capabilities(
        fencing="strictly increasing per name, and never going back: each is at least this "
        "host's wall clock in microseconds, so also in a new process and after clean-up "
        "removed a name idle for gc_after (10 minutes by default)",
        # The "server" is the process: a new one starts empty, yet above every fence an
        # earlier one issued, by the clock floor (unless the host's clock is set back).
        fences_survive_restart=True,
        fences_count_per_name=False,
        leases_survive_restart=False,
        wakeups="in-process",
        multi_host=False,
        fault_tolerant=False,
    )

    def __init__(
        self,
        server: MemoryServer,
        server_name: str = "",
        gc_after: float | None = DEFAULT_GC_AFTER,
    ) -> None:
        self.server = server
        self.server_name = server_name
        self.gc_after = gc_after
        """Seconds a record outlives its last use (None: forever)."""

    @classmethod
    def from_url(cls, url: str, **options: Any) -> AsyncMemoryBackend:
        settings = settings_from_url(url, options)
        return cls(server_named(settings.server_name), settings.server_name, settings.gc_after)

    def describe(self) -> str:
        return f"memory://{self.server_name}"

    async def acquire(
        self, name: str, spec: LeaseSpec, token: str, ttl: float, holder: Holder
    ) -> Grant | Busy:
        return self.server.acquire(name, spec, token, ttl, holder, gc_after=self.gc_after)

    async def quick_try(
        self, name: str, spec: LeaseSpec, token: str, ttl: float, holder: Holder
    ) -> Grant | None:
        outcome = self.server.acquire(name, spec, token, ttl, holder, gc_after=self.gc_after,
                                      queue=False)
        return outcome if isinstance(outcome, Grant) else None

    async def release(self, kind: Kind, name: str, token: str) -> bool:
        return self.server.release(kind, name, token, gc_after=self.gc_after)

    async def extend_many(self, renewals: Sequence[Renewal]) -> list[bool]:
        return [
            self.server.extend(r.kind, r.name, r.token, r.ttl, gc_after=self.gc_after)
            for r in renewals
        ]

    async def owned(self, kind: Kind, name: str, token: str) -> bool:
        return self.server.owned(kind, name, token)

    async def inspect(self, kind: Kind, name: str) -> LockInfo | None:
        return self.server.inspect(kind, name)

    async def list_records(self, kind: Kind, prefix: str) -> list[LockInfo]:
        return self.server.list_records(kind, prefix)

    async def break_leases(self, kind: Kind, name: str) -> bool:
        return self.server.break_leases(kind, name, gc_after=self.gc_after)

    async def set_value(self, name: str, token: str, value: str) -> bool:
        return self.server.set_value(name, token, value)


BACKEND = AsyncMemoryBackend
