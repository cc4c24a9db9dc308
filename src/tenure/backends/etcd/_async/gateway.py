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

TLS (``etcds://``): one ``ssl.SSLContext`` per gateway, shared by its members' clients. It
checks the members' certificates against ``ssl_ca`` when given, else against the system's CA
store (OpenSSL's default paths, which ``SSL_CERT_FILE``/``SSL_CERT_DIR`` override), and
presents ``ssl_cert``/``ssl_key`` when given, whether or not ``ssl_ca`` is.

Auth (credentials in the URL): a token from ``/v3/auth/authenticate`` rides on every request.
Tokens end (etcd's simple tokens after ``--auth-token-ttl`` seconds unused, 5 minutes by
default; any token when the member that issued it restarts), so an answer "invalid auth token"
(401) logs in again and repeats the request, once per attempt. A server without auth enabled
answers the login "authentication is not enabled": like etcd's own Go client, tenure then
sends no token, and logs in if the server later asks for a user name (auth enabled since).
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

import httpx

from tenure._concurrency import async_io as io
from tenure.backends.etcd._answers import (
    AUTH_NOT_ENABLED,
    FAILED_PRECONDITION,
    JSON,
    NO_TOKEN,
    UNAVAILABLE,
    TokenRejected,
    Unavailable,
    auth_header,
    code_and_message,
    decode,
    tls_context,
    tls_failure,
)
from tenure.backends.etcd._config import EtcdSettings
from tenure.backends.etcd._errors import EtcdError, NotFound
from tenure.backends.etcd._keys import Record
from tenure.backends.etcd._slots import Slot
from tenure.backends.etcd._statements import kvs

__all__ = ["AsyncGateway", "NotFound"]

UNAVAILABLE_PAUSE = 0.05
"""Seconds between two tries of a request that a member answered with UNAVAILABLE."""


class AsyncGateway:
    def __init__(self, settings: EtcdSettings) -> None:
        self.settings = settings
        self._clients: list[httpx.AsyncClient] = []
        self._pid = 0
        self._preferred = 0
        """The endpoint that answered last: requests start there."""
        self._token: str | None = None
        """The auth token; None: log in first (when credentials are given); NO_TOKEN: the
        server has auth disabled."""
        # Built here, so that a missing or wrong file is a ConfigurationError from connect();
        # plain http:// members need none: building one loads the CA bundle (about 0.1 s of
        # CPU), which a fresh process would pay before its first request.
        https = settings.endpoints[0].startswith("https://")
        self._tls = tls_context(settings) if https else None
        self._closed = False
        self._mutex = io.Mutex()
        self.requests = 0
        """HTTP requests sent so far (every try, logins and watches included): what
        ``bench/consensus_bench.py`` counts per cycle and per handoff."""
        self.watches = 0
        """Of ``requests``, the watches (a stream held open until an event or its timeout)."""

    def _endpoints(self) -> tuple[list[httpx.AsyncClient], bool]:
        """The members' clients, opened at first use (and again in a forked child), and
        whether they are the call's own. After ``aclose`` a call still works (a failed
        acquire's clean-up, a last renewal) on clients of its own, closed when it ends:
        nothing would close a pool opened after close."""
        with self._mutex:
            # Under the mutex that ``aclose`` takes: a call that saw the gateway open
            # before a close on another thread (the renewal store's first connection, made
            # in the background, and a client closed at once) would else fill the emptied
            # pool after it, with clients nothing closes (ci27: their sockets' ResourceWarning
            # failed a later test of the worker).
            if self._closed:
                return [self._client(endpoint) for endpoint in self.settings.endpoints], True
            if self._pid != os.getpid() or not self._clients:
                # A forked child must not share its parent's sockets: it opens its own.
                self._token = None
                self._clients = [self._client(endpoint) for endpoint in self.settings.endpoints]
                self._pid = os.getpid()
            return self._clients, False

    def _client(self, endpoint: str) -> httpx.AsyncClient:
        return httpx.AsyncClient(
            base_url=endpoint,
            timeout=self.settings.timeout,
            verify=self._tls if self._tls is not None else False,
            limits=httpx.Limits(max_keepalive_connections=16),
        )

    async def post(
        self, path: str, body: JSON | str, *, timeout: float | None = None,
        track: Slot | None = None,
    ) -> JSON:
        """POST ``body`` to ``path``; the JSON answer. Raises NotFound for gRPC code 5 and
        EtcdError when no member answers within the deadline or one answers an error (the
        store's base makes it a BackendError naming the verb and the lock).

        ``track``: the slot whose key the request writes (``_slots``): told when it is
        sent, when a member answered it, and when it was sent again after a failed try."""
        if track is None:
            (answer,) = await self._exchange(path, body, timeout)
            return answer
        track.sending()
        try:
            (answer,) = await self._exchange(path, body, timeout, track)
        except NotFound:
            track.answered()  # a member's answer: not applied
            raise
        track.answered()
        return answer

    async def post_stream(self, path: str, body: str) -> list[JSON]:
        """POST a stream of JSON messages (``body``: them, one after another) to a streaming
        endpoint; its answers, one per message."""
        return await self._exchange(path, body, None)

    async def _exchange(
        self, path: str, body: JSON | str, timeout: float | None, track: Slot | None = None
    ) -> list[JSON]:
        clients, own = self._endpoints()  # first: opening them is not the reply time
        try:
            return await self._exchange_with(clients, path, body, timeout, track)
        finally:
            if own:
                await _close_all(clients)

    async def _exchange_with(
        self, clients: list[httpx.AsyncClient], path: str, body: JSON | str,
        timeout: float | None, track: Slot | None = None,
    ) -> list[JSON]:
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
                answers = await self._attempt(clients[index], path, body, left)
            except (httpx.TransportError, OSError) as exc:
                if track is not None:
                    track.doubt()  # it may have reached the member, and may still land
                last = exc
                unreachable += 1
                if index == self._preferred:
                    # A member that hangs (partitioned, paused) uses up the whole deadline,
                    # leaving no time to try another: the next request must start elsewhere,
                    # or a renewal would go to the same silent member until the lease ends.
                    self._preferred = (index + 1) % len(clients)
                continue
            except Unavailable as exc:
                # "leader changed", "no leader": an election is under way, usually over in
                # well under a second. Ask again (another member first) until the deadline;
                # every request tenure sends is safe to repeat (see above). A write answered
                # "leader changed" may still be committed.
                if track is not None:
                    track.doubt()
                last = exc
                unreachable = 0
                await io.sleep(min(UNAVAILABLE_PAUSE, max(0.0, deadline - time.monotonic())))
                continue
            self._preferred = index
            return answers
        tls = tls_failure(last)
        if tls is not None:
            # Not a slow cluster: a certificate refused (ours or theirs). Say which options
            # decide it, not "no member answered".
            raise EtcdError(
                f"TLS with the members failed on {path}: "
                f"{tls} (check ssl_ca, or the system CA store without it, and "
                f"ssl_cert/ssl_key when the members require client certificates)"
            ) from last
        raise EtcdError(
            f"no member answered {path} within "
            f"{timeout or self.settings.timeout} s: {last}"
        ) from last

    async def _attempt(
        self, client: httpx.AsyncClient, path: str, body: JSON | str, timeout: float
    ) -> list[JSON]:
        """One member, one request: log in when needed, send, log in again if the token was
        refused, decode. Transport errors and Unavailable go to the caller (next member)."""
        started = time.monotonic()
        content = body if isinstance(body, str) else json.dumps(body)
        token = await self._ensure_token(client, timeout)
        left, refreshed = timeout, False
        while True:
            self.requests += 1
            response = await client.post(
                path, content=content, headers=auth_header(token), timeout=left
            )
            try:
                return decode(path, response, self.settings)
            except TokenRejected:
                code, message = code_and_message(response)
            if self.settings.username is None:
                raise EtcdError(
                    f"the members have authentication enabled: "
                    f"give user:password in the URL ({path}: {message})"
                )
            if refreshed:
                raise EtcdError(
                    f"{path}: {message} (code {code}), right after "
                    f"logging in as {self.settings.username!r}"
                )
            # The token expired (or auth was enabled since we learnt it was off): log in and
            # send once more, to the same member, within what is left of the deadline.
            with self._mutex:
                if self._token == token:
                    self._token = None
            token = await self._ensure_token(
                client, max(0.001, timeout - (time.monotonic() - started))
            )
            left, refreshed = max(0.001, timeout - (time.monotonic() - started)), True

    async def _ensure_token(self, client: httpx.AsyncClient, timeout: float) -> str | None:
        """The token to send (logging in first if there is none yet): None without
        credentials, NO_TOKEN when the server has auth off (both: no header)."""
        if self.settings.username is None:
            return None
        token = self._token
        if token is None:
            token = await self._login(client, timeout)
        return token

    async def _login(self, client: httpx.AsyncClient, timeout: float) -> str:
        credentials = {"name": self.settings.username, "password": self.settings.password or ""}
        self.requests += 1
        response = await client.post(
            "/v3/auth/authenticate", content=json.dumps(credentials), timeout=timeout
        )
        if response.status_code == 200:
            try:
                token = json.loads(response.text).get("token")
            except (ValueError, AttributeError):
                token = None
            if token:
                self._token = str(token)
                return self._token
        code, message = code_and_message(response)
        if code == UNAVAILABLE:
            raise Unavailable(f"{message} (code {code})")  # a login goes through Raft
        if code == FAILED_PRECONDITION and AUTH_NOT_ENABLED in message:
            # Credentials for a server without auth: work without a token, as etcd's own
            # client does; a later "user name is empty" (auth enabled since) logs in then.
            self._token = NO_TOKEN
            return NO_TOKEN
        raise EtcdError(
            f"authentication failed for user "
            f"{self.settings.username!r}: {message} (code {code}, HTTP {response.status_code})"
        )

    async def watch_deletes(
        self, key: str, range_end: str | None, start_revision: int, timeout: float,
        created: int | None = None,
    ) -> bool:
        """Return at the first deletion of ``key`` (or of any key in [key, range_end)) at or
        after ``start_revision``, or after ``timeout`` seconds, or at any error: the caller
        checks again after every return, so a watch bug or a compaction only costs a wait.
        False: a quiet timeout (no event, no error); True: anything else.

        A watch that starts at a past revision is served by etcd's catch-up loop, which runs
        every 100 ms: a deletion just before it opens would wake the waiter up to 100 ms
        late. So a single key's watch starts now, and if the cluster moved on since
        ``start_revision`` (the revision in the watch's "created" answer), one read tells
        whether the key is still there (then any later deletion is in the watch) or gone
        (return at once). ``created``: the key's creation revision, when known: a key of that
        name written again since (a reused name: ``_slots``) is not the one watched."""
        clients, own = self._endpoints()
        try:
            return await self._watch(clients[self._preferred % len(clients)], key, range_end,
                                     start_revision, timeout, created=created)
        finally:
            if own:
                await _close_all(clients)

    def _watch_stream(self, request: JSON, timeout: float) -> dict[str, Any]:
        """The arguments of a watch's stream that waits up to ``timeout`` for a line, the
        watch counted among the requests. The token as it is: none yet (a forked child) or
        expired only cancels this watch, and the caller's next read logs in."""
        self.requests += 1
        self.watches += 1
        return {
            "content": json.dumps({"create_request": request}),
            "headers": auth_header(self._token or None),
            "timeout": httpx.Timeout(self.settings.timeout, read=max(timeout, 0.001)),
        }

    async def _watch(
        self, client: httpx.AsyncClient, key: str, range_end: str | None,
        start_revision: int, timeout: float, *, created: int | None,
    ) -> bool:
        request: JSON = {"key": key, "filters": ["NOPUT"]}
        from_now = range_end is None and start_revision > 0
        if range_end is not None:
            request["range_end"] = range_end
        if not from_now:
            request["start_revision"] = str(start_revision)
        deadline = time.monotonic() + timeout
        try:
            async with client.stream(
                "POST", "/v3/watch", **self._watch_stream(request, timeout)
            ) as response:
                if response.status_code != 200:
                    return True
                async for line in response.aiter_lines():
                    result = json.loads(line).get("result", {}) if line.strip() else {}
                    if result.get("events") or result.get("canceled") or result.get("error"):
                        return True
                    if from_now and result.get("created"):
                        # The watch sees what comes after this revision; anything between
                        # start_revision and it, only a read can tell.
                        watched_from = int(result.get("header", {}).get("revision", 0)) + 1
                        if watched_from > start_revision and not await self._exists(
                            key, created
                        ):
                            return True
                    if time.monotonic() >= deadline:
                        return False
        except httpx.ReadTimeout:
            return False  # no line within the wait: a quiet timeout
        except (httpx.HTTPError, OSError, ValueError, EtcdError):
            return True
        return True  # the stream ended

    async def watch_turn(
        self, key: str, start_revision: int, timeout: float, *, created: int,
        granted: bool,
    ) -> str:
        """A lock's waiter's wait on ``key``, the newest key older than its own (created at
        ``created``; ``granted``: known to have held the lock): "head" at its deletion once
        it is known to have held the lock (its record written as a holder's, not queued:
        only a grant writes that, and a grant had no older key, none of which can appear
        again, so with it gone nothing is ahead); "woken" at a deletion of a key not known
        so, or at anything else (an error, the stream's end): the caller looks again;
        "quiet" after ``timeout`` seconds without an event. Puts are watched too, to see the
        key written as its holder's. The watch starts now (as ``watch_deletes``); if the
        cluster moved on since ``start_revision``, one read tells what became of the key."""
        clients, own = self._endpoints()
        client = clients[self._preferred % len(clients)]
        deadline = time.monotonic() + timeout
        try:
            async with client.stream(
                "POST", "/v3/watch", **self._watch_stream({"key": key}, timeout)
            ) as response:
                if response.status_code != 200:
                    return "woken"
                async for line in response.aiter_lines():
                    result = json.loads(line).get("result", {}) if line.strip() else {}
                    if result.get("canceled") or result.get("error"):
                        return "woken"
                    if result.get("created"):
                        watched_from = int(result.get("header", {}).get("revision", 0)) + 1
                        if watched_from > start_revision:
                            found = kvs(await self.post("/v3/kv/range", {"key": key}))
                            if not found or int(found[0]["create_revision"]) != created:
                                return "head" if granted else "woken"
                            granted = granted or not Record.decode(
                                found[0].get("value", "")).queued
                    for event in result.get("events") or ():
                        kv = event.get("kv", {})
                        if (event.get("type") == "DELETE"
                                or int(kv.get("create_revision", 0)) != created):
                            return "head" if granted else "woken"  # the key we watched went
                        granted = granted or not Record.decode(kv.get("value", "")).queued
                    if time.monotonic() >= deadline:
                        return "quiet"
        except httpx.ReadTimeout:
            return "quiet"
        except (httpx.HTTPError, OSError, ValueError, EtcdError):
            return "woken"
        finally:
            if own:
                await _close_all(clients)
        return "woken"  # the stream ended

    async def _exists(self, key: str, created: int | None) -> bool:
        """Whether ``key`` is there (the one created at ``created``, when given)."""
        answer = await self.post("/v3/kv/range", {"key": key, "keys_only": True})
        found = answer.get("kvs") or []
        return bool(found) and (created is None or int(found[0]["create_revision"]) == created)

    async def aclose(self) -> None:
        with self._mutex:
            self._closed = True
            clients, self._clients = self._clients, []
            pid, self._pid = self._pid, 0
        if pid == os.getpid():
            await _close_all(clients)


async def _close_all(clients: list[httpx.AsyncClient]) -> None:
    for client in clients:
        await client.aclose()
