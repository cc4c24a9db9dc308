"""The protected resource: one shared integer that worker processes read and write under the
lock, served by the controller over a Unix socket.

It is the thing a lock exists to protect, so it is where safety is judged: it logs every
read and write in the order it serialised them (``history.Access``). With ``fenced=True`` it
checks every access's fence with ``tenure.FenceGuard``, the helper tenure ships for protected
resources: a read or write carrying a fence older than one already seen is refused. Reads are
fenced too, so a new holder's first touch already locks out the holders before it (a
resource that checks writes only would accept a paused holder's write if no newer holder had
written yet). With ``fenced=False`` it accepts everything, as a resource relying on the lease
alone does.

Protocol: one JSON object per line each way.
    {"op": "read",  "section": "w1:7", "fence": 12}             -> {"ok": true, "value": 41}
    {"op": "write", "section": "w1:7", "fence": 12, "value": 42} -> {"ok": true, "value": 42}
A refused access answers {"ok": false, "value": <current>, "latest": <highest fence seen>}.
"""

from __future__ import annotations

import json
import pathlib
import shutil
import socket
import socketserver
import tempfile
import threading
from typing import Any

import tenure
from safety.history import Access, Recorder, now_ns

__all__ = ["Resource", "ResourceClient"]


class _Handler(socketserver.StreamRequestHandler):
    server: _Server

    def handle(self) -> None:
        for line in self.rfile:
            try:
                request = json.loads(line)
                answer = self.server.resource.serve(request)
            except (ValueError, KeyError, TypeError) as exc:
                answer = {"ok": False, "error": f"bad request: {exc}"}
            try:
                self.wfile.write(json.dumps(answer).encode() + b"\n")
                self.wfile.flush()
            except OSError:  # the worker was killed mid-request
                return


class _Server(socketserver.ThreadingUnixStreamServer):
    daemon_threads = True

    def __init__(self, path: str, resource: Resource) -> None:
        self.resource = resource
        super().__init__(path, _Handler)


class Resource:
    """The shared integer, its access log and (when ``fenced``) its fence guard."""

    NAME = "counter"

    def __init__(self, directory: pathlib.Path, *, fenced: bool) -> None:
        # Unix socket paths are short (108 bytes): keep it out of deep test directories.
        self._socket_dir = pathlib.Path(tempfile.mkdtemp(prefix="safety-"))
        self.path = self._socket_dir / "resource.sock"
        self.fenced = fenced
        self.value = 0
        self._guard = tenure.FenceGuard()
        self._mutex = threading.Lock()
        self._seq = 0
        self._log = Recorder(directory / "resource.jsonl")
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> Resource:
        self._server = _Server(str(self.path), self)
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(0.05,), name="safety-resource", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        self._log.close()
        shutil.rmtree(self._socket_dir, ignore_errors=True)

    def latest_fence(self) -> int:
        """The highest fence a write or read has shown the guard (0: none yet)."""
        return self._guard.latest(self.NAME)

    def set_fenced(self, fenced: bool) -> None:
        with self._mutex:
            self.fenced = fenced

    def serve(self, request: dict[str, Any]) -> dict[str, Any]:
        op = request["op"]
        if op not in ("read", "write"):
            raise ValueError(f"unknown op {op!r}")
        fence = request.get("fence")
        section = str(request["section"])
        with self._mutex:  # one access at a time: the log's order is the resource's order
            accepted = True
            if self.fenced:
                accepted = fence is not None and self._guard.accepts(fence, self.NAME)
            asked = self.value if op == "read" else int(request["value"])
            if accepted and op == "write":
                self.value = asked
            self._seq += 1
            self._log.write(
                Access(self._seq, now_ns(), op, section, fence, accepted, asked, self.fenced)
            )
            answer: dict[str, Any] = {"ok": accepted, "value": self.value}
            if not accepted:
                answer["latest"] = self._guard.latest(self.NAME)
        return answer


class ResourceClient:
    """A worker's connection to the resource (blocking, one request at a time)."""

    def __init__(self, path: str, timeout: float = 30.0) -> None:
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.settimeout(timeout)
        self._sock.connect(path)
        self._file = self._sock.makefile("rwb")

    def _ask(self, request: dict[str, Any]) -> dict[str, Any]:
        self._file.write(json.dumps(request).encode() + b"\n")
        self._file.flush()
        line = self._file.readline()
        if not line:
            raise ConnectionError("the resource closed the connection")
        answer: dict[str, Any] = json.loads(line)
        return answer

    def read(self, section: str, fence: int | None) -> tuple[bool, int]:
        answer = self._ask({"op": "read", "section": section, "fence": fence})
        return bool(answer["ok"]), int(answer["value"])

    def write(self, section: str, fence: int | None, value: int) -> bool:
        answer = self._ask({"op": "write", "section": section, "fence": fence, "value": value})
        return bool(answer["ok"])

    def close(self) -> None:
        self._file.close()
        self._sock.close()
