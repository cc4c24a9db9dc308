"""``sqlite:///relative.db`` and ``sqlite:////absolute.db`` for asyncio: the blocking
sqlite3 calls of ``_store`` run in worker threads.

Waiting is queued and woken (see ``_store`` and ``_doorbell``): a refused attempt takes a
place in the name's queue, a release rings the longest waiter, and a free lock goes to that
waiter rather than to whoever asks first. Read-write and fair locks queue in the same table
and are woken the same way: a release rings every waiter the grant rule now admits."""

from __future__ import annotations

import pathlib
import urllib.parse
from typing import Any

from tenure._async.blocking_store import AsyncBlockingQueueBackend
from tenure._async.capabilities import AsyncLeaseValueSupport
from tenure._concurrency import async_io as io
from tenure._errors import ConfigurationError
from tenure._options import DEFAULT_GC_AFTER, gc_after_option, number_option
from tenure._types import Busy, Capabilities, Grant, Holder
from tenure._urls import default_sqlite_path, redact
from tenure.backends.sqlite import SCHEMES
from tenure.backends.sqlite._doorbell import Ticket
from tenure.backends.sqlite._store import SQLiteStore

__all__ = ["BACKEND", "AsyncSQLiteBackend"]

SYNCHRONOUS = ("normal", "full", "extra")


class AsyncSQLiteBackend(
    AsyncBlockingQueueBackend[SQLiteStore], AsyncLeaseValueSupport
):
    """Options (URL query or keyword): ``busy_timeout`` seconds to wait for SQLite's write
    lock (default 10), ``synchronous`` = normal (default: durable across process crashes)
    or full (also across power loss, at one fsync per operation), ``gc_after`` seconds an
    idle name's record is kept (default 10 minutes; ``none``: forever)."""

    schemes = SCHEMES
    capabilities = Capabilities(
        fencing=(
            "strictly increasing per name, at least the host's clock in microseconds: never "
            "back, across releases, restarts, a lost file and the clean-up of a name idle "
            "for gc_after (10 minutes by default)"
        ),
        fences_survive_restart=True,
        fences_count_per_name=False,
        leases_survive_restart=True,
        wakeups="queued, first come first served; woken across processes (unix sockets)",
        multi_host=False,
        fault_tolerant=False,
    )
    max_backoff = 0.25
    """Only a lost ring waits this long: a waiter is woken by the release itself."""
    local = True
    notifies = True

    @classmethod
    def from_url(cls, url: str, **options: Any) -> AsyncSQLiteBackend:
        parts = urllib.parse.urlsplit(url)
        if parts.netloc:
            raise ConfigurationError(
                f"sqlite URLs have no host: sqlite:///relative.db or sqlite:////absolute.db, "
                f"not {redact(url)!r}"
            )
        raw_path = urllib.parse.unquote(parts.path[1:] if parts.path.startswith("/") else "")
        if not raw_path:
            raise ConfigurationError(f"sqlite URL names no file: {redact(url)!r}")
        query = dict(urllib.parse.parse_qsl(parts.query))
        settings = {**query, **options}
        unknown = set(settings) - {"busy_timeout", "synchronous", "gc_after"}
        if unknown:
            raise ConfigurationError(f"unknown sqlite option(s): {sorted(unknown)}")
        busy_timeout = number_option("sqlite", "busy_timeout",
                                     settings.get("busy_timeout", 10.0), unit=" seconds",
                                     above=0)
        gc_after = gc_after_option("sqlite", settings.get("gc_after", DEFAULT_GC_AFTER))
        synchronous = str(settings.get("synchronous", "normal")).lower()
        if synchronous not in SYNCHRONOUS:
            raise ConfigurationError(f"sqlite synchronous must be one of {SYNCHRONOUS}")
        path = pathlib.Path(raw_path)
        if path == default_sqlite_path():
            # The per-user default: private to the user, created on first use.
            try:
                path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            except OSError as exc:
                raise ConfigurationError(
                    f"cannot create the directory of the default SQLite file {path}: "
                    f"{exc.strerror or exc}; set XDG_STATE_HOME to a writable directory, or "
                    "TENURE_URL (e.g. sqlite:///path/to/locks.db)"
                ) from exc
        elif not path.parent.is_dir():
            raise ConfigurationError(f"cannot use SQLite database {path}: no such directory")
        return cls(SQLiteStore(path, busy_timeout, synchronous, gc_after))

    def describe(self) -> str:
        return f"sqlite:///{self.store.path}"

    async def acquire(
        self, name: str, token: str, ttl: float, holder: Holder, waited: Busy | None = None
    ) -> Grant | Busy:
        return await io.run_blocking(
            self.store.acquire, name, token, ttl, holder, None, ticket=_ticket(waited)
        )

    async def wait_for_release(
        self, name: str, timeout: float, busy: Busy | None = None
    ) -> None:
        await _wait_for_ring(busy, timeout)

    async def abandon_wait(self, name: str, busy: Busy) -> None:
        ticket = _ticket(busy)
        if ticket is not None and ticket.placed:
            await io.run_blocking(self.store.leave, ticket)

    async def acquire_with_value(
        self,
        name: str,
        token: str,
        ttl: float,
        holder: Holder,
        *,
        value: str,
        waited: Busy | None = None,
    ) -> Grant | Busy:
        return await io.run_blocking(
            self.store.acquire, name, token, ttl, holder, value, ticket=_ticket(waited)
        )

    async def set_value(self, name: str, token: str, value: str) -> bool:
        return await io.run_blocking(self.store.set_value, name, token, value)


    # ---- read-write and fair locks ----------------------------------------------------------

    async def acquire_queued(
        self,
        name: str,
        token: str,
        ttl: float,
        holder: Holder,
        *,
        mode: str,
        queue_ttl: float,
        waited: Busy | None = None,
    ) -> Grant | Busy:
        return await io.run_blocking(
            self.store.acquire_queued, name, token, ttl, holder, mode=mode,
            queue_ttl=queue_ttl, ticket=_ticket(waited),
        )

    async def wait_for_turn(self, name: str, timeout: float, busy: Busy | None = None) -> None:
        await _wait_for_ring(busy, timeout)


async def _wait_for_ring(busy: Busy | None, timeout: float) -> None:
    """Until the waiter's doorbell rings (a release or break admitted it), or ``timeout``."""
    ticket = _ticket(busy)
    if ticket is None or not ticket.placed:
        await io.sleep(timeout)
        return
    signal = io.Signal()
    if not ticket.attach(signal):
        return  # rung between two attempts
    try:
        await signal.wait(timeout)
    finally:
        ticket.detach()


def _ticket(busy: Busy | None) -> Ticket | None:
    waiting = None if busy is None else busy.waiting
    return waiting if isinstance(waiting, Ticket) else None


BACKEND = AsyncSQLiteBackend
