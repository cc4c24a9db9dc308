"""etcd's JSON gateway (``POST /v3/...``) over httpx: endpoints, failover, auth, errors.

Why the gateway and httpx rather than a gRPC client: no maintained Python etcd client covers
both sync and asyncio with revisions (python-etcd3's last release breaks on protobuf >= 4,
etcd3gw is sync only, aetcd async only), and gRPC's C core is not fork-safe, which rule 8
(a forked child holds nothing and reconnects) needs. The gateway is part of every etcd v3
server, speaks the same API as gRPC with JSON bodies (64-bit integers as strings, bytes as
base64), and httpx gives one client API for both flavours: this module is written once for
asyncio and generated for threads.

Failover: a request that cannot reach a member (refused, reset, timed out) is sent to the
next member, within the request's deadline. Every request tenure sends is safe to repeat:
writes are guarded transactions on the caller's own key, and a retried lease grant only leaves
a spare lease that expires on its own.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

import httpx

from tenure._concurrency import async_io as io
from tenure._errors import BackendError
from tenure.backends.etcd._config import EtcdSettings

__all__ = ["AsyncGateway", "NotFound"]

JSON = dict[str, Any]


UNAVAILABLE = 14
"""gRPC's UNAVAILABLE: etcd's "leader changed" and "no leader", while members elect."""
UNAVAILABLE_PAUSE = 0.05
"""Seconds between two tries of a request that a member answered with UNAVAILABLE."""


class _Unavailable(Exception):
    """A member answered UNAVAILABLE: try again until the request's deadline."""


class NotFound(Exception):
    """etcd answered "not found" (gRPC code 5), e.g. a lease that expired or was revoked."""


class AsyncGateway:
    def __init__(self, settings: EtcdSettings) -> None:
        self.settings = settings
        self._clients: list[httpx.AsyncClient] = []
        self._pid = 0
        self._preferred = 0
        """The endpoint that answered last: requests start there."""
        self._token: str | None = None
        self._mutex = io.Mutex()

    def _endpoints(self) -> list[httpx.AsyncClient]:
        with self._mutex:
            if self._pid != os.getpid() or not self._clients:
                # A forked child must not share its parent's sockets: it opens its own.
                self._token = None
                self._clients = [self._client(endpoint) for endpoint in self.settings.endpoints]
                self._pid = os.getpid()
            return self._clients

    def _client(self, endpoint: str) -> httpx.AsyncClient:
        settings = self.settings
        # Plain http:// members need no TLS context: building one loads the CA bundle (about
        # 0.1 s of CPU per member), which a fresh process would pay before its first request.
        verify: Any = endpoint.startswith("https://")
        if settings.ssl_ca:
            import ssl

            verify = ssl.create_default_context(cafile=settings.ssl_ca)
            if settings.ssl_cert and settings.ssl_key:
                verify.load_cert_chain(settings.ssl_cert, settings.ssl_key)
        return httpx.AsyncClient(
            base_url=endpoint,
            timeout=settings.timeout,
            verify=verify,
            limits=httpx.Limits(max_keepalive_connections=16),
        )

    async def post(self, path: str, body: JSON | str, *, timeout: float | None = None) -> JSON:
        """POST ``body`` to ``path``; the JSON answer. Raises NotFound for gRPC code 5 and
        BackendError when no member answers within the deadline or one answers an error."""
        (answer,) = await self._exchange(path, body, timeout)
        return answer

    async def post_stream(self, path: str, body: str) -> list[JSON]:
        """POST a stream of JSON messages (``body``: them, one after another) to a streaming
        endpoint; its answers, one per message."""
        return await self._exchange(path, body, None)

    async def _exchange(self, path: str, body: JSON | str, timeout: float | None) -> list[JSON]:
        clients = self._endpoints()  # first: opening them is not the server's reply time
        deadline = time.monotonic() + (timeout or self.settings.timeout)
        last: Exception | None = None
        unreachable = 0
        attempt = 0
        while unreachable < len(clients):
            index = (self._preferred + attempt) % len(clients)
            attempt += 1
            left = deadline - time.monotonic()
            if left <= 0:
                break
            try:
                response = await self._send(clients[index], path, body, left)
            except (httpx.TransportError, OSError) as exc:
                last = exc
                unreachable += 1
                if index == self._preferred:
                    # A member that hangs (partitioned, paused) uses up the whole deadline,
                    # leaving no time to try another: the next request must start elsewhere,
                    # or a renewal would go to the same silent member until the lease ends.
                    self._preferred = (index + 1) % len(clients)
                continue
            self._preferred = index
            try:
                return await self._answer(path, response, body, clients[index], left)
            except _Unavailable as exc:
                # "leader changed", "no leader": an election is under way, usually over in
                # well under a second. Ask again (another member first) until the deadline;
                # every request tenure sends is safe to repeat (see above).
                last = exc
                unreachable = 0
                await io.sleep(min(UNAVAILABLE_PAUSE, max(0.0, deadline - time.monotonic())))
        raise BackendError(
            f"etcd {self.settings.display}: no member answered {path} within "
            f"{timeout or self.settings.timeout} s: {last}"
        ) from last

    async def _send(
        self, client: httpx.AsyncClient, path: str, body: JSON | str, timeout: float
    ) -> httpx.Response:
        content = body if isinstance(body, str) else json.dumps(body)
        headers = {"Authorization": self._token} if self._token else {}
        if self.settings.username is not None and self._token is None:
            headers = {"Authorization": await self._login(client, timeout)}
        return await client.post(path, content=content, headers=headers, timeout=timeout)

    async def _answer(
        self,
        path: str,
        response: httpx.Response,
        body: JSON | str,
        client: httpx.AsyncClient,
        timeout: float,
    ) -> list[JSON]:
        if response.status_code == 401 and self.settings.username is not None:
            # The auth token expired (etcd's default: 5 minutes): log in again, once.
            self._token = None
            response = await self._send(client, path, body, timeout)
        try:
            answers: list[JSON] = [
                json.loads(line) for line in response.text.splitlines() if line.strip()
            ]
        except ValueError as exc:
            raise BackendError(
                f"etcd {self.settings.display}: {path} answered {response.status_code} "
                f"with no JSON"
            ) from exc
        if response.status_code == 200 and answers:
            return answers
        answer = answers[0] if answers else {}
        code = answer.get("code")
        message = answer.get("message") or answer.get("error") or response.text[:200]
        if code == 5:
            raise NotFound(message)
        if code == UNAVAILABLE:
            raise _Unavailable(f"{message} (code {code})")
        raise BackendError(f"etcd {self.settings.display}: {path}: {message} (code {code})")

    async def _login(self, client: httpx.AsyncClient, timeout: float) -> str:
        credentials = {"name": self.settings.username, "password": self.settings.password or ""}
        response = await client.post(
            "/v3/auth/authenticate", content=json.dumps(credentials), timeout=timeout
        )
        token = response.json().get("token") if response.status_code == 200 else None
        if not token:
            raise BackendError(
                f"etcd {self.settings.display}: authentication failed for user "
                f"{self.settings.username!r} ({response.status_code})"
            )
        self._token = str(token)
        return self._token

    async def watch_deletes(
        self, key: str, range_end: str | None, start_revision: int, timeout: float
    ) -> None:
        """Return at the first deletion of ``key`` (or of any key in [key, range_end)) at or
        after ``start_revision``, or after ``timeout`` seconds, or at any error: the caller
        checks again after every return, so a watch bug or a compaction only costs a wait."""
        clients = self._endpoints()
        client = clients[self._preferred % len(clients)]
        request: JSON = {"key": key, "start_revision": str(start_revision), "filters": ["NOPUT"]}
        if range_end is not None:
            request["range_end"] = range_end
        headers = {"Authorization": self._token} if self._token else {}
        limits = httpx.Timeout(self.settings.timeout, read=max(timeout, 0.001))
        deadline = time.monotonic() + timeout
        try:
            async with client.stream(
                "POST", "/v3/watch", content=json.dumps({"create_request": request}),
                headers=headers, timeout=limits,
            ) as response:
                if response.status_code != 200:
                    return
                async for line in response.aiter_lines():
                    result = json.loads(line).get("result", {}) if line.strip() else {}
                    if result.get("events") or result.get("canceled") or result.get("error"):
                        return
                    if time.monotonic() >= deadline:
                        return
        except (httpx.HTTPError, OSError, ValueError):
            return

    async def aclose(self) -> None:
        with self._mutex:
            clients, self._clients = self._clients, []
            pid, self._pid = self._pid, 0  # used again (a renewal after close): reconnect
        if pid == os.getpid():
            for client in clients:
                await client.aclose()
