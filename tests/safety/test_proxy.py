"""The fault-injection proxy (safety.proxy): pass, blackhole and reset, switched at runtime."""

from __future__ import annotations

import contextlib
import socket
import socketserver
import threading
from collections.abc import Iterator

import pytest
from safety.proxy import Proxy


class _Echo(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        with contextlib.suppress(OSError):  # the proxy resets its side: expected here
            while data := self.request.recv(4096):
                self.request.sendall(data)


class _EchoServer(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True


@pytest.fixture
def echo() -> Iterator[tuple[str, int]]:
    server = _EchoServer(("127.0.0.1", 0), _Echo)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        host, port = server.server_address[:2]
        yield str(host), int(port)
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def proxy(echo: tuple[str, int]) -> Iterator[Proxy]:
    with Proxy(echo) as running:
        yield running


def connect(proxy: Proxy, timeout: float = 2.0) -> socket.socket:
    return socket.create_connection(("127.0.0.1", proxy.port), timeout=timeout)


def round_trip(conn: socket.socket, payload: bytes) -> bytes:
    conn.sendall(payload)
    received = b""
    while len(received) < len(payload):
        chunk = conn.recv(4096)
        if not chunk:
            break
        received += chunk
    return received


def test_pass_forwards_both_ways(proxy: Proxy) -> None:
    with connect(proxy) as conn:
        assert round_trip(conn, b"hello") == b"hello"
        assert round_trip(conn, b"x" * 100_000) == b"x" * 100_000
    assert proxy.accepted == 1
    assert proxy.bytes_forwarded >= 200_010


def test_blackhole_accepts_reads_and_never_answers(proxy: Proxy) -> None:
    with connect(proxy) as before:
        assert round_trip(before, b"ping") == b"ping"
        proxy.set_mode("blackhole")
        before.settimeout(0.3)
        before.sendall(b"lost")
        with pytest.raises(TimeoutError):
            before.recv(16)
        with connect(proxy, timeout=0.3) as during:  # accepted, drained, silent
            during.sendall(b"anybody there?")
            with pytest.raises(TimeoutError):
                during.recv(16)
    assert proxy.bytes_dropped >= len(b"lost")


def test_reset_aborts_open_and_new_connections_with_rst(proxy: Proxy) -> None:
    with connect(proxy) as before:
        assert round_trip(before, b"ping") == b"ping"
        proxy.set_mode("reset")
        with pytest.raises(ConnectionResetError):
            # The RST may surface on the send or on the receive.
            before.sendall(b"after")
            before.recv(16)
    with pytest.raises(ConnectionResetError), connect(proxy) as during:
        # Accepted, then reset: the RST may even beat connect()'s return.
        during.sendall(b"x")
        during.recv(16)
    assert proxy.resets >= 2


def test_back_to_pass_heals_and_drops_blackholed_streams(proxy: Proxy) -> None:
    with connect(proxy) as stale:
        assert round_trip(stale, b"one") == b"one"
        proxy.set_mode("blackhole")
        stale.sendall(b"dropped")
        deadline = threading.Event()
        while proxy.bytes_dropped == 0 and not deadline.wait(0.01):
            pass
        proxy.set_mode("pass")
        with pytest.raises(ConnectionResetError):
            stale.recv(16)  # its stream lost bytes: reset, not silently resumed
    with connect(proxy) as fresh:
        assert round_trip(fresh, b"healed") == b"healed"
    assert proxy.mode == "pass"


def test_unreachable_target_resets_the_client() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        dead_port = probe.getsockname()[1]
    with (
        Proxy(("127.0.0.1", dead_port)) as proxy,
        pytest.raises(ConnectionResetError),
        connect(proxy) as conn,
    ):
        conn.sendall(b"x")
        conn.recv(16)


def test_rejects_unknown_modes(proxy: Proxy) -> None:
    with pytest.raises(ValueError):
        proxy.set_mode("drop")  # type: ignore[arg-type]
