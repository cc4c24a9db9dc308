"""One kazoo client per process, every call bounded and its errors translated.

kazoo runs its own I/O thread and offers ``*_async`` calls returning a result that thread
completes; ``io.result_of`` awaits it (asyncio) or waits for it (threads), so the backend is
written once for asyncio and generated for threads with no second copy of the logic. A
forked child opens its own client: kazoo's threads do not survive a fork.

The node errors a step decides on (no such node, bad version, node exists) reach the caller
as kazoo raised them; every other failure (connection lost, session expired, no reply within
``timeout``) is a BackendError.
"""

from __future__ import annotations

import contextlib
import functools
import os
import threading
from collections.abc import Sequence
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import (
    BadVersionError,
    KazooException,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
)

from tenure._concurrency import async_io as io
from tenure._errors import BackendError
from tenure.backends.zookeeper._calls import start
from tenure.backends.zookeeper._config import ZooKeeperSettings

__all__ = ["DECIDING", "AsyncSession"]

DECIDING = (NoNodeError, BadVersionError, NodeExistsError, NotEmptyError)
"""Answers about nodes that a step decides on: not failures."""


class AsyncSession:
    def __init__(self, settings: ZooKeeperSettings) -> None:
        self.settings = settings
        self._client: KazooClient | None = None
        self._pid = 0
        self._mutex = io.Mutex()
        self._started = threading.Event()
        self._starting = threading.Lock()

    async def client(self) -> KazooClient:
        with self._mutex:
            if self._pid != os.getpid() or self._client is None:
                self._client = KazooClient(
                    hosts=self.settings.hosts,
                    timeout=self.settings.session_timeout,
                    auth_data=[("digest", ":".join(self.settings.auth))]
                    if self.settings.auth else None,
                )
                self._pid = os.getpid()
                self._started = threading.Event()
            client, started = self._client, self._started
        if not started.is_set():
            await io.run_blocking(self._start_once, client, started)
        return client

    def _start_once(self, client: KazooClient, started: threading.Event) -> None:
        """Connect, once per client: kazoo's ``start`` on a client that is reconnecting
        would close it and end its session (and every node it holds), so a started client
        is never started again; kazoo reconnects it by itself."""
        with self._starting:
            if started.is_set():
                return
            try:
                client.start(self.settings.timeout)
            except Exception as exc:
                with contextlib.suppress(Exception):
                    client.stop()
                raise BackendError(
                    f"ZooKeeper {self.settings.display}: cannot connect within "
                    f"{self.settings.timeout} s: {exc}"
                ) from exc
            started.set()

    async def call(self, operation: str, *args: Any, **kwargs: Any) -> Any:
        """kazoo's ``<operation>`` call's result within ``timeout`` seconds."""
        client = await self.client()
        try:
            result = start(client, operation, *args, **kwargs)
            return await io.result_of(result, self.settings.timeout)
        except DECIDING:
            raise
        except TimeoutError as exc:
            raise BackendError(
                f"ZooKeeper {self.settings.display}: no reply to {operation} within "
                f"{self.settings.timeout} s"
            ) from exc
        except (KazooException, OSError) as exc:
            raise BackendError(
                f"ZooKeeper {self.settings.display}: {operation} failed: "
                f"{type(exc).__name__} {exc}"
            ) from exc

    async def call_many(
        self, operation: str, calls: Sequence[tuple[Any, ...]]
    ) -> list[Any]:
        """Several ``operation`` calls sent at once (kazoo pipelines them on its connection);
        each one's answer, or the node error it got (``DECIDING``) in its place."""
        client = await self.client()
        try:
            pending = [start(client, operation, *args) for args in calls]
            answers: list[Any] = []
            for result in pending:
                try:
                    answers.append(await io.result_of(result, self.settings.timeout))
                except DECIDING as exc:
                    answers.append(exc)
            return answers
        except TimeoutError as exc:
            raise BackendError(
                f"ZooKeeper {self.settings.display}: no reply to {operation} within "
                f"{self.settings.timeout} s"
            ) from exc
        except (KazooException, OSError) as exc:
            raise BackendError(
                f"ZooKeeper {self.settings.display}: {operation} failed: "
                f"{type(exc).__name__} {exc}"
            ) from exc

    async def aclose(self) -> None:
        with self._mutex:
            client, self._client = self._client, None
            pid, self._pid = self._pid, 0
        if client is not None and pid == os.getpid():
            # kazoo's stop waits for its connection thread, which may be in a connect attempt
            # to a dead server for up to the session timeout: not worth waiting for, the
            # thread ends on its own and the session with it.
            with contextlib.suppress(io.DeadlineExceeded):
                await io.bounded(functools.partial(io.run_blocking, _stop, client), STOP_LIMIT)


STOP_LIMIT = 1.0
"""Seconds ``aclose`` waits for kazoo to stop."""


def _stop(client: KazooClient) -> None:
    client.stop()
    client.close()
