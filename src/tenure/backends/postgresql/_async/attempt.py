"""One acquire call's tries on PostgreSQL: before each try the attempt marks how far the
store's listener had got, so that its wait returns at once for a release that landed
between the refusal and the wait (see ``listener``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tenure._async.store import AsyncAttempt
from tenure._types import Busy, Grant, Holder, LeaseSpec
from tenure.backends.postgresql._async.listener import Mark

if TYPE_CHECKING:
    from tenure.backends.postgresql._async.store import AsyncPostgreSQLStore

__all__ = ["AsyncPostgreSQLAttempt"]


class AsyncPostgreSQLAttempt(AsyncAttempt):
    store: AsyncPostgreSQLStore

    def __init__(
        self, store: AsyncPostgreSQLStore, name: str, spec: LeaseSpec, *, token: str,
        ttl: float, holder: Holder,
    ) -> None:
        super().__init__(store, name, spec, token=token, ttl=ttl, holder=holder)
        self.channel = store.channel(spec.kind, name)
        self.mark: Mark | None = None
        """Where the listener stood when the last try was sent (None: no listener yet)."""

    async def try_once(self) -> Grant | Busy:
        self.mark = self.store.mark(self.channel)  # before the statement is sent
        return await self.store.acquire(self.name, self.spec, self.token, self.ttl,
                                        self.holder)

    async def wait(self, timeout: float, busy: Busy) -> None:
        await self.store.wait(self.channel, self.before_place_lapses(timeout), self.mark)
