"""A client's renewal connections: the store its renewal scheduler renews through. Under
asyncio the scheduler runs on a thread of its own (``tenure._concurrency.renewal_loop``), so
that a blocked event loop cannot starve renewals: it renews through
``store.renewal_store()``, whose connections belong to that thread's loop, made once per
client (and process). The threads flavour renews through the store itself. Written for
asyncio; ``scripts/unasync.py`` generates the threads flavour.
"""

from __future__ import annotations

import contextlib
import functools
import os

from tenure._async.store import AsyncStore
from tenure._concurrency import async_io as io
from tenure._types import Kind

__all__ = ["AsyncRenewalConnections"]


class AsyncRenewalConnections:
    """The renewal store of one client's ``store``, made at the first renewing lease."""

    def __init__(self, store: AsyncStore) -> None:
        self.store = store
        self._renewals: AsyncStore | None = None
        """The store renewals go through, once made; ``_renewals_pid``: the process that
        made it."""
        self._renewals_pid = 0
        self._mutex = io.ThreadMutex()
        self._connecting: object = None
        """The renewal store's first connection, under way (``io.begin_on_renewal_loop``):
        closing waits for it, or it would open connections nobody closes."""

    def store_for(self, name: str) -> AsyncStore:
        """The store to renew a lease of ``name`` through."""
        if not io.RENEWS_ON_OWN_LOOP:
            return self.store
        with self._mutex:
            made = self._renewals is None or self._renewals_pid != os.getpid()
            if made:
                # A forked child makes its own: the parent's connections are not its own.
                self._renewals = self.store.renewal_store()
                self._renewals_pid = os.getpid()
            renewals = self._renewals
            assert renewals is not None
        if made and renewals is not self.store:
            # Connect now, not in the first renewal: that one is due at ttl/3 and must not
            # spend its lease on a connection set-up (a cluster's discovery, TLS, auth).
            self._connecting = io.begin_on_renewal_loop(
                functools.partial(_connect, renewals, name)
            )
        return renewals

    async def aclose(self) -> None:
        """Close the renewal store this process made (not the client's own store)."""
        with self._mutex:
            renewals = self._renewals
            ours = self._renewals_pid == os.getpid()
        if renewals is not None and renewals is not self.store and ours:
            # Its connections belong to the renewal thread's loop: closed there.
            await io.on_renewal_loop(renewals.aclose, after=self._connecting)


async def _connect(store: AsyncStore, name: str) -> None:
    """Have ``store`` open its connections (to the server of ``name``, where it matters):
    a read whose answer nobody needs. A failure is the first renewal's to report."""
    with contextlib.suppress(Exception):
        await store.inspect(Kind.LOCK, name)
