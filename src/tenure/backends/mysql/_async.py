"""``mysql://`` and ``mariadb://`` for asyncio. Each blocking PyMySQL call of ``_store`` goes
through ``io.run_blocking``: a worker thread under asyncio, the caller's own thread otherwise.

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

import random
import urllib.parse
from typing import Any

from tenure._async.legacy_blocking_store import AsyncBlockingQueueBackend
from tenure._async.capabilities import AsyncLeaseValueSupport
from tenure._async.wakeups import wait_for_notice
from tenure._concurrency import async_io as io
from tenure._errors import ConfigurationError
from tenure._options import DEFAULT_GC_AFTER, gc_after_option
from tenure._types import Busy, Capabilities, Grant, Holder
from tenure._urls import redact
from tenure.backends._sql_common import sql_options
from tenure.backends.mysql import SCHEMES
from tenure.backends.mysql._store import FALLBACK_PAUSE, GateWait, MySQLStore

__all__ = ["BACKEND", "AsyncMySQLBackend"]

OWN_OPTIONS = ("gc_after",)
"""This backend's own options beside the shared SQL ones."""
URL_OPTIONS = ("unix_socket", "ssl_ca", "ssl_cert", "ssl_key", "ssl_verify_cert",
               "ssl_verify_identity")
"""Query parameters that go to PyMySQL as they are."""
KEYWORD_OPTIONS = ("ssl",)
"""Keyword-only: ``ssl`` takes an ``ssl.SSLContext`` or PyMySQL's dict."""


class AsyncMySQLBackend(AsyncBlockingQueueBackend[MySQLStore], AsyncLeaseValueSupport):
    """Options (URL query or keyword): ``table`` (default ``tenure_locks``), ``timeout``
    seconds for connecting and for each statement's reply (default 5), ``pool_size`` idle
    connections kept (default 10), ``gc_after`` seconds an idle name's records are kept
    (default 10 minutes; ``none``: forever; fences never go back either way); ``unix_socket``,
    ``ssl_ca``, ``ssl_cert``, ``ssl_key``, ``ssl_verify_cert``, ``ssl_verify_identity`` for
    PyMySQL; keyword ``ssl`` (an
    ``ssl.SSLContext``). The URL names the database: ``mysql://user:pw@host:3306/db``."""

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
    max_backoff = 0.5
    notifies = True
    """Lock waiters block on the holder's release gate (see ``_store``); this only bounds a
    wait whose wake-up was missed. A waiter whose holder holds no gate, and a semaphore
    waiter, a read-write or fair lock waiter pause at most ``FALLBACK_PAUSE`` instead."""

    @classmethod
    def from_url(cls, url: str, **options: Any) -> AsyncMySQLBackend:
        display = redact(url)
        try:
            parts = urllib.parse.urlsplit(url)
            port = parts.port
        except ValueError as exc:
            raise ConfigurationError(f"bad MySQL URL {display!r}: {exc}") from None
        if parts.scheme.lower() not in cls.schemes:
            raise ConfigurationError(f"not a MySQL URL: {display!r}")
        database = urllib.parse.unquote(parts.path.lstrip("/"))
        if not database or "/" in database:
            raise ConfigurationError(
                f"a MySQL URL names one database: mysql://user:password@host:3306/db, "
                f"not {display!r}"
            )
        query = dict(urllib.parse.parse_qsl(parts.query, keep_blank_values=True))
        settings, extra = sql_options(
            "mysql", query, options, (*OWN_OPTIONS, *URL_OPTIONS, *KEYWORD_OPTIONS)
        )
        gc_after = gc_after_option("mysql", extra.pop("gc_after", DEFAULT_GC_AFTER))
        keyword_in_url = set(query) & set(KEYWORD_OPTIONS)
        if keyword_in_url:
            raise ConfigurationError(f"{sorted(keyword_in_url)} can only be keyword options")
        connect_args: dict[str, Any] = {
            "host": parts.hostname or "localhost",
            "port": port or 3306,
            "user": urllib.parse.unquote(parts.username) if parts.username else None,
            "password": urllib.parse.unquote(parts.password) if parts.password else "",
            "database": database,
        }
        for key, value in extra.items():
            flag = key in ("ssl_verify_cert", "ssl_verify_identity") and isinstance(value, str)
            connect_args[key] = value.lower() in ("1", "true", "yes", "on") if flag else value
        return cls(MySQLStore(connect_args, settings, display, gc_after))

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
        # The plain acquire's statement with the value columns added: same gate, same one
        # round trip (see ``Statements.acquire_value``).
        return await io.run_blocking(self.store.acquire, name, token, ttl, holder, value)

    async def set_value(self, name: str, token: str, value: str) -> bool:
        return await io.run_blocking(self.store.set_value, name, token, value)

    async def wait_for_release(
        self, name: str, timeout: float, busy: Busy | None = None
    ) -> None:
        """Block on the holder's release gate, which the release opens (see ``_store``).
        Without a gate to block on (the holder took none, too many waits in flight here,
        a pause too short for ``GET_LOCK``), wait for a release in this process, or a short
        back-off pause."""
        waiting = None if busy is None else busy.waiting
        gate = waiting.gate if isinstance(waiting, GateWait) else None
        wait = None if gate is None else self.store.gate_wait_seconds(timeout)
        if (
            gate is not None
            and wait is not None
            and await io.run_blocking(self.store.wait_gate, gate, wait)
        ):
            return
        pause = min(timeout, random.uniform(FALLBACK_PAUSE / 2, FALLBACK_PAUSE))
        await wait_for_notice(self.store.waiters, name, pause)

    async def wait_for_permit(
        self, name: str, timeout: float, busy: Busy | None = None
    ) -> None:
        # No gate for semaphores (a permit has many holders, a GET_LOCK waits for one):
        # in-process wake-ups, short back-off pauses across processes.
        await super().wait_for_permit(
            name, min(timeout, random.uniform(FALLBACK_PAUSE / 2, FALLBACK_PAUSE)), busy
        )

    async def wait_for_turn(self, name: str, timeout: float, busy: Busy | None = None) -> None:
        # No gate for read-write and fair locks either: a turn comes when any of many
        # holders leaves, a place ahead lapses or a reader ahead is granted, and a GET_LOCK
        # follows one session's lease (docs/backends/sql.md). In-process wake-ups, short
        # back-off pauses across processes.
        await super().wait_for_turn(
            name, min(timeout, random.uniform(FALLBACK_PAUSE / 2, FALLBACK_PAUSE)), busy
        )

    def describe(self) -> str:
        return self.store.display


BACKEND = AsyncMySQLBackend
