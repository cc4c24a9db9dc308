"""Clean-up of idle records (rule 10): each table is swept in the background, at most once
per ``min(gc_after, SWEEP_EVERY)`` per store, after a grant or a release of its kind. The
acquire/release cycle itself never waits for it nor sends anything more."""

from __future__ import annotations

import logging
import time

from tenure._concurrency import async_io as io
from tenure._errors import StoreFault
from tenure.backends.postgresql._async.connection import AsyncPool, Connection, fetch_row
from tenure.backends.postgresql._errors import DRIVER_ERRORS
from tenure.backends.postgresql._sql import SWEEP_LOCK_TIMEOUT

__all__ = ["SWEEP_EVERY", "SWEEP_LIMIT", "SWEEP_LOCK_WAIT_MS", "AsyncCleanup"]

logger = logging.getLogger("tenure")

SKIPPED: tuple[type[BaseException], ...] = (StoreFault, *DRIVER_ERRORS)
"""A clean-up pass that fails so is skipped: a lock wait given up, a server away, the
client closed meanwhile."""

SWEEP_EVERY = 60.0
"""Seconds between two clean-ups of one table by one store, at most (and at most
``gc_after``): an idle record goes between gc_after and gc_after + this after its last use."""
SWEEP_LIMIT = 1000
"""Names one clean-up removes at most; a clean-up that removed this many is due again at
once, so a backlog goes in bounded steps."""
SWEEP_LOCK_WAIT_MS = 100
"""A clean-up waits this long at most for a row lock, then gives up until next time."""


class AsyncCleanup:
    """When each table's next clean-up may run, and the sweeps themselves."""

    def __init__(self, pool: AsyncPool, gc_after: float | None) -> None:
        self._pool = pool
        self._gc_after = gc_after
        self._due: dict[str, float] = {}
        """When each table's next clean-up may run (``time.monotonic()``), by table."""

    def collect(self, table: str, statement: str) -> None:
        """Start the clean-up of ``table`` (its ``sweep`` statement) if it is due."""
        gc_after = self._gc_after
        if gc_after is None:
            return
        now = time.monotonic()
        with self._pool.mutex:
            if self._pool.closed or self._due.get(table, 0.0) > now:
                return
            # Claimed under the mutex: other threads and tasks skip it until then.
            self._due[table] = now + min(gc_after, SWEEP_EVERY)
        params = {"gc_after": gc_after, "limit": SWEEP_LIMIT, "ms": str(SWEEP_LOCK_WAIT_MS)}

        async def sweep(connection: Connection) -> int:
            # A transaction, only so that the lock timeout is its own and ends with it.
            async with connection.transaction():
                await connection.execute(SWEEP_LOCK_TIMEOUT, params)
                row = await fetch_row(connection, statement, params)
            return int(row[0])

        async def clean_up() -> None:
            try:
                # On a connection of its own: the pool the lock steps use stays as it was
                # (no extra idle connection left behind, none taken from under them).
                removed = await self._pool.run(sweep, pooled=False)
            except SKIPPED as exc:  # next time (or never, once closed)
                logger.debug("tenure: PostgreSQL clean-up of %s: %s", table, exc)
                return
            if removed >= SWEEP_LIMIT:
                with self._pool.mutex:
                    self._due[table] = 0.0  # more to remove: due again at once

        io.start_background(clean_up, name="tenure-postgresql-clean-up")
