"""The store's one LISTEN connection, shared by every waiter of the process (or event
loop): a background task (threads: a daemon thread) that turns notifications into wake-ups
of this process's waiters, reconnecting with back-off when the connection drops.

A release that lands between a refused acquire and the start of its wait would be missed;
an attempt therefore takes a ``Mark`` of how far the listener had got before it sends its
acquire, and its wait returns at once if a notice for its channel (or a reconnection) came
since.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
from collections import OrderedDict

from tenure._concurrency import async_io as io
from tenure._waiters import Waiters
from tenure.backends._sql_common import abandon
from tenure.backends.postgresql._async.connection import AsyncPool, Connection, close_quietly
from tenure.backends.postgresql._errors import DRIVER_ERRORS
from tenure.backends.postgresql._watchdog import shut_down

__all__ = ["AsyncListener", "Mark"]

logger = logging.getLogger("tenure")

MAX_REMEMBERED_NOTICES = 4096


@dataclasses.dataclass(frozen=True)
class Mark:
    """Where the listener stood when an acquire attempt was sent."""

    listener: AsyncListener
    channel: str
    sequence: int
    epoch: int


class AsyncListener:
    def __init__(self, pool: AsyncPool, listen: str) -> None:
        self.waiters = Waiters()
        self._pool = pool
        self._listen = listen
        self._pid = os.getpid()
        self._scope = io.scope()
        self._mutex = threading.Lock()  # the listener and the waiters may be different threads
        self._sequence = 0
        self._epoch = 0
        self._connected = False
        self._notices: OrderedDict[str, int] = OrderedDict()
        self._closed = False
        self._connection: Connection | None = None

    def serves_here(self) -> bool:
        return not self._closed and self._pid == os.getpid() and self._scope is io.scope()

    def start(self) -> None:
        io.start_background(self._run, name="tenure-postgresql-listener")

    def mark(self, channel: str) -> Mark:
        with self._mutex:
            epoch = self._epoch if self._connected else -1
            return Mark(self, channel, self._sequence, epoch)

    async def wait(self, channel: str, timeout: float, mark: Mark | None) -> None:
        """Sleep until a NOTIFY for ``channel`` or ``timeout``; at once if one came (or the
        connection came up or went down) since ``mark``."""
        signal = io.Signal()
        with self.waiters.waiting(channel, signal):
            if mark is not None and mark.listener is self and self._changed_since(mark):
                return
            await signal.wait(timeout)

    def _changed_since(self, mark: Mark) -> bool:
        with self._mutex:
            epoch = self._epoch if self._connected else -1
            if epoch != mark.epoch:
                return epoch != -1 or mark.epoch != -1
            return self._notices.get(mark.channel, -1) > mark.sequence

    def close(self) -> None:
        with self._mutex:
            self._closed = True
            connection = self._connection
            if connection is not None and not connection.closed:
                # Wakes the listener out of its wait; it then closes the connection itself.
                shut_down(connection.fileno())

    def abandon(self) -> None:
        """Forget a listener of a parent process or of another event loop, without touching
        its connection through a loop or thread that no longer runs."""
        with self._mutex:
            self._closed = True
            connection = self._connection
        if connection is None:
            return
        if self._pid != os.getpid():
            abandon([connection])
        else:
            connection.pgconn.finish()

    def _stopped(self) -> bool:
        return self._closed  # a method: mypy would take the loop's test as still holding

    def _deliver(self, channel: str) -> None:
        with self._mutex:
            self._sequence += 1
            self._notices[channel] = self._sequence
            self._notices.move_to_end(channel)
            if len(self._notices) > MAX_REMEMBERED_NOTICES:
                self._notices.popitem(last=False)
        self.waiters.notify(channel)

    async def _run(self) -> None:
        retry = 0.05
        while not self._closed:
            connection: Connection | None = None
            try:
                connection = await self._pool.connect()
                with self._mutex:
                    if self._stopped():
                        break
                    self._connection = connection
                await connection.execute(self._listen)
                with self._mutex:
                    self._epoch += 1
                    self._connected = True
                retry = 0.05
                async for notice in connection.notifies():
                    self._deliver(notice.payload)
            except DRIVER_ERRORS as exc:
                if not self._closed:
                    logger.debug("tenure: PostgreSQL listener: %s; reconnecting", exc)
            finally:
                with self._mutex:
                    self._connected = False
                    self._connection = None
                if connection is not None and self._pid == os.getpid():
                    await close_quietly(connection)
            if not self._closed:
                await io.sleep(retry)
                retry = min(retry * 2, 2.0)
