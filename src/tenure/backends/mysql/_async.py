"""``mysql://`` and ``mariadb://`` for asyncio. Each blocking PyMySQL call of ``_store`` goes
through ``io.run_blocking`` (``AsyncBlockingShell``): a worker thread under asyncio, the
caller's own thread otherwise. A lock's attempt keeps the gate its last refusal named and
blocks on it (``AsyncMySQLAttempt``).

Why, under asyncio, PyMySQL in worker threads rather than aiomysql or asyncmy: one driver
serves both flavours, so the statements, the connection set-up and every error path are the
same code, tested once. Each operation is
a single short statement, so a worker thread is busy for one round trip; the price is a
thread hop per operation, and at most as many operations in flight at once as the event
loop's default executor has threads. aiomysql pins PyMySQL versions and trails its releases;
asyncmy is a Cython rewrite with its own protocol code: either would be a second driver to
keep in step for no change in what a lock guarantees.
"""


from __future__ import annotations

import functools
import random
from typing import Any

from tenure._async.blocking_store import AsyncBlockingAttempt, AsyncBlockingShell
from tenure._async.store import WITH_WEIGHTS
from tenure._async.wakeups import wait_for_notice
from tenure._concurrency import async_io as io
from tenure._types import Busy, Capabilities, Grant, Kind
from tenure.backends.mysql import SCHEMES
from tenure.backends.mysql._config import settings
from tenure.backends.mysql._errors import DRIVER_ERRORS
from tenure.backends.mysql._locks import FALLBACK_PAUSE, GateWait
from tenure.backends.mysql._store import MySQLTable

__all__ = ["BACKEND", "AsyncMySQLAttempt", "AsyncMySQLStore"]


class AsyncMySQLAttempt(AsyncBlockingAttempt):
    """One acquire call's tries. A lock's keeps the gate its last refusal named
    (``GateWait``) and blocks on it; a semaphore's and a read-write lock's wait for a
    release in this process, or a short back-off pause."""

    store: AsyncMySQLStore

    @functools.cached_property
    def gate_wait(self) -> GateWait | None:
        """The gate a lock attempt's last refusal named; None for the other kinds."""
        return GateWait() if self.spec.kind is Kind.LOCK else None

    async def try_once(self) -> Grant | Busy:
        return await io.run_blocking(
            self.store.store.acquire, self.name, self.spec, self.token, self.ttl, self.holder,
            wait=self.gate_wait,
        )

    async def wait(self, timeout: float, busy: Busy) -> None:
        """A lock's: block on the holder's release gate, which the release opens (see
        ``_locks``). Without a gate to block on (the holder took none, too many waits in
        flight here, a pause too short for ``GET_LOCK``), and for the other kinds (no gate:
        a turn comes when any of many holders leaves, a place ahead lapses or a reader
        ahead is granted), wait for a release in this process, or a short back-off pause."""
        table = self.store.store
        gate = None if self.gate_wait is None else self.gate_wait.gate
        wait = None if gate is None else table.locks.gate_wait_seconds(timeout)
        if (
            gate is not None
            and wait is not None
            and await io.run_blocking(table.locks.wait_gate, gate, wait)
        ):
            return
        pause = min(timeout, random.uniform(FALLBACK_PAUSE / 2, FALLBACK_PAUSE))
        if self.gate_wait is None:
            await super().wait(pause, busy)
        else:
            await wait_for_notice(table.waiters, self.name, pause)


class AsyncMySQLStore(AsyncBlockingShell[MySQLTable]):
    """Options (URL query or keyword): ``table`` (default ``tenure_locks``), ``timeout``
    seconds for connecting and for each statement's reply (default 5), ``pool_size`` idle
    connections kept (default 10), ``gc_after`` seconds an idle name's records are kept
    (default 10 minutes; ``none``: forever; fences never go back either way); ``unix_socket``,
    ``ssl_ca``, ``ssl_cert``, ``ssl_key``, ``ssl_verify_cert``, ``ssl_verify_identity`` for
    PyMySQL; keyword ``ssl`` (an
    ``ssl.SSLContext``). The URL names the database: ``mysql://user:pw@host:3306/db``."""
    attempt_class = AsyncMySQLAttempt

    schemes = SCHEMES
    capabilities = Capabilities(
        fencing=(
            "strictly increasing per name: max(the stored fence + 1, the server's clock in "
            "microseconds), in the granting statement; stored across releases and restarts, "
            "and never going back when gc_after removed an idle name's record or the server "
            "lost its data"
        ),
        fences_survive_restart=True,
        fences_count_per_name=False,
        leases_survive_restart=True,
        wakeups="notification (a GET_LOCK the holder's session holds until its release)",
        multi_host=True,
        fault_tolerant=False,
    )
    offers = WITH_WEIGHTS
    driver_errors = DRIVER_ERRORS
    max_backoff = 0.5
    notifies = True
    """Lock waiters block on the holder's release gate (see ``_store``); this only bounds a
    wait whose wake-up was missed. A waiter whose holder holds no gate, and a semaphore
    waiter, a read-write or fair lock waiter pause at most ``FALLBACK_PAUSE`` instead."""

    @classmethod
    def from_url(cls, url: str, **options: Any) -> AsyncMySQLStore:
        given = settings(url, options)
        return cls(MySQLTable(given.connect_args, given.options, given.display, given.gc_after))

    def describe(self) -> str:
        return self.store.display


BACKEND = AsyncMySQLStore
