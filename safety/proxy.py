"""A TCP proxy between a client and a server, to cut connections on demand.

    with Proxy(("127.0.0.1", 6379)) as proxy:        # listens on a free loopback port
        url = f"redis://127.0.0.1:{proxy.port}/0"    # hand this to the client under test
        proxy.set_mode("blackhole")                  # the network goes silent
        proxy.set_mode("reset")                      # every connection is torn down with RST
        proxy.set_mode("pass")                       # healed

Modes, switchable at any time from any thread:
- ``pass``: bytes flow both ways.
- ``blackhole``: a partition seen from the client. Connections stay open; whatever either side
  sends is read and dropped, nothing is ever answered. New connections are accepted and
  drained the same way, without reaching the server. A client only finds out by its own
  timeouts.
- ``reset``: every open connection is aborted with a TCP RST (``SO_LINGER`` 0), and new ones
  are accepted then reset at once, so a client fails fast on every attempt.

Going back to ``pass`` resets the connections that lost bytes while blackholed (their
protocol streams can't be trusted any more, as after a real partition whose sockets timed
out); connections opened afterwards work normally.

The proxy runs its own asyncio loop in a daemon thread, so sync tests and scripts use it as
they are. It listens on loopback only.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import threading
from types import TracebackType
from typing import Literal

__all__ = ["MODES", "Mode", "Proxy"]

Mode = Literal["pass", "blackhole", "reset"]
MODES: tuple[Mode, ...] = ("pass", "blackhole", "reset")

CHUNK = 65536
LINGER_ZERO = struct.pack("ii", 1, 0)


def _reset(writer: asyncio.StreamWriter) -> None:
    """Abort the connection with a RST rather than a FIN."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, LINGER_ZERO)
    writer.transport.abort()


class _Link:
    """One client connection and, in pass mode, its connection to the server."""

    def __init__(self, client: asyncio.StreamWriter) -> None:
        self.client = client
        self.upstream: asyncio.StreamWriter | None = None
        self.tainted = False
        """Bytes were dropped: the streams no longer line up."""
        self.tasks: list[asyncio.Task[None]] = []

    def abort(self) -> None:
        _reset(self.client)
        if self.upstream is not None:
            _reset(self.upstream)
        for task in self.tasks:
            task.cancel()


class Proxy:
    """Forwards ``127.0.0.1:port`` to ``target``; see the module docstring for the modes."""

    def __init__(
        self, target: tuple[str, int], *, port: int = 0, mode: Mode = "pass"
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
        self.target = target
        self._requested_port = port
        self._mode: Mode = mode
        self._links: set[_Link] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.Server | None = None
        self._thread: threading.Thread | None = None
        self._started = threading.Event()
        self._start_error: BaseException | None = None
        self.port = 0
        self.accepted = 0
        """Connections accepted so far, in any mode."""
        self.resets = 0
        """Connections this proxy aborted with a RST."""
        self.bytes_forwarded = 0
        self.bytes_dropped = 0

    def __repr__(self) -> str:
        return f"<Proxy 127.0.0.1:{self.port} -> {self.target[0]}:{self.target[1]} {self._mode}>"

    @property
    def mode(self) -> Mode:
        return self._mode

    # ---- life cycle --------------------------------------------------------------------

    def start(self) -> Proxy:
        """Listen and return once connections are accepted."""
        if self._thread is not None:
            raise RuntimeError("proxy already started")
        self._thread = threading.Thread(target=self._serve, name="safety-proxy", daemon=True)
        self._thread.start()
        self._started.wait(10)
        if self._start_error is not None:
            raise RuntimeError(f"proxy could not listen: {self._start_error}")
        if not self._started.is_set():
            raise RuntimeError("proxy did not start within 10 s")
        return self

    def stop(self) -> None:
        """Close the listener and reset every connection."""
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        with contextlib.suppress(RuntimeError):  # the loop already ended
            asyncio.run_coroutine_threadsafe(self._shutdown(), loop).result(10)
        thread.join(10)
        self._loop = None

    def __enter__(self) -> Proxy:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    def set_mode(self, mode: Mode) -> None:
        """Switch mode; returns once the switch is in effect (connections already reset)."""
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
        loop = self._loop
        if loop is None:
            raise RuntimeError("proxy not started")
        asyncio.run_coroutine_threadsafe(self._switch(mode), loop).result(10)

    @property
    def connections(self) -> int:
        """Client connections open right now."""
        return len(self._links)

    # ---- the loop's side ---------------------------------------------------------------

    def _serve(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            loop.run_until_complete(self._listen())
        except BaseException as exc:
            self._start_error = exc
            self._started.set()
            loop.close()
            return
        self._started.set()
        try:
            loop.run_forever()
        finally:
            loop.close()

    async def _listen(self) -> None:
        self._server = await asyncio.start_server(
            self._accept, "127.0.0.1", self._requested_port, reuse_address=True
        )
        self.port = self._server.sockets[0].getsockname()[1]

    async def _shutdown(self) -> None:
        if self._server is not None:
            self._server.close()
        for link in list(self._links):
            link.abort()
        self._links.clear()
        others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in others:
            task.cancel()
        await asyncio.gather(*others, return_exceptions=True)
        assert self._loop is not None
        self._loop.call_soon(self._loop.stop)

    async def _switch(self, mode: Mode) -> None:
        previous, self._mode = self._mode, mode
        if mode == "reset":
            doomed = list(self._links)
        elif mode == "pass" and previous == "blackhole":
            doomed = [link for link in self._links if link.tainted]
        else:
            doomed = []
        for link in doomed:
            self._abort(link)

    def _abort(self, link: _Link) -> None:
        if link in self._links:
            self._links.discard(link)
            self.resets += 1
            link.abort()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        link = _Link(writer)
        self._links.add(link)
        if self._mode == "reset":
            self._abort(link)
            return
        if self._mode == "pass":
            try:
                up_reader, up_writer = await asyncio.wait_for(
                    asyncio.open_connection(*self.target), 10
                )
            except (OSError, TimeoutError):
                self._abort(link)
                return
            if link not in self._links:  # reset while we were connecting
                _reset(up_writer)
                return
            link.upstream = up_writer
            link.tasks = [
                asyncio.create_task(self._pump(link, reader, up_writer, from_client=True)),
                asyncio.create_task(self._pump(link, up_reader, writer, from_client=False)),
            ]
        else:  # blackhole: drain the client, never connect upstream
            link.tasks = [asyncio.create_task(self._pump(link, reader, None, from_client=True))]
        await asyncio.gather(*link.tasks, return_exceptions=True)
        if link in self._links:
            self._links.discard(link)
            for side in (link.client, link.upstream):
                if side is not None:
                    side.close()

    async def _pump(
        self,
        link: _Link,
        source: asyncio.StreamReader,
        sink: asyncio.StreamWriter | None,
        *,
        from_client: bool,
    ) -> None:
        try:
            while True:
                data = await source.read(CHUNK)
                if not data:
                    break
                if self._mode == "pass" and sink is not None and not link.tainted:
                    self.bytes_forwarded += len(data)
                    sink.write(data)
                    await sink.drain()
                else:
                    link.tainted = True
                    self.bytes_dropped += len(data)
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            # One side closed: end the whole link, as a direct connection would. But behind
            # a blackhole the client must not see the server hang up: only its own side ends it.
            if from_client or self._mode != "blackhole":
                for task in link.tasks:
                    if task is not asyncio.current_task():
                        task.cancel()
