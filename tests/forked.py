"""Worker processes forked from a warm interpreter instead of started from scratch.

A multi-process test starts its workers as ``python -m MODULE ARGS``: a new interpreter that
imports tenure and a driver (redis-py alone costs 0.14 CPU-seconds to import) before it does
anything. The suite starts over a thousand of them. Here each test process keeps one
"zygote": a child interpreter that imported tenure, every backend and their drivers once and
then only forks. A worker forked from it is still a real process of its own (its own pid,
connections, signals, exit status; SIGSTOP and SIGKILL reach it as before), begun with a
fresh environment, working directory, argv and standard streams, running ``MODULE`` as
``__main__`` just as ``python -m`` would. It costs a fork instead of an interpreter start.

``popen`` falls back to a real ``subprocess.Popen`` where a fork cannot stand in for an
exec: an environment that changes what the dynamic loader or the interpreter reads at
start-up (``LD_PRELOAD``, as the safety harness's moved clocks use, ``PYTHON*``), or
``TENURE_TEST_FORKS=0`` (to compare, or to rule the zygote out).

The zygote is the parent of the workers, so it reaps them and reports each exit status over
its socket; the test process sees a ``Forked`` object with the part of ``Popen``'s interface
the tests use. The zygote ends when the test process does (its socket closes).
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import io
import os
import pathlib
import pickle
import random
import select
import signal
import socket
import struct
import subprocess
import sys
import threading
import traceback
from collections.abc import Iterable, Mapping, Sequence
from typing import IO, Any

__all__ = ["Forked", "popen"]

ROOT = pathlib.Path(__file__).resolve().parents[1]
_SWITCH = "TENURE_TEST_FORKS"
# What a fork cannot change after the fact: read by the loader or the interpreter at start.
_EXEC_ONLY = ("LD_", "PYTHON")
_HEADER = struct.Struct("!I")


def popen(module: str, args: Sequence[str], *, cwd: str | os.PathLike[str] | None = None,
          env: Mapping[str, str] | None = None, stdin: int | IO[Any] | None = None,
          stdout: int | IO[Any] | None = None, stderr: int | IO[Any] | None = None,
          text: bool = False) -> subprocess.Popen[Any] | Forked:
    """``subprocess.Popen([sys.executable, "-m", module, *args], ...)``, forked from the
    zygote where it can stand in (see the module's text). ``stdin``/``stdout``/``stderr``:
    ``subprocess.PIPE``, an open file, or None (this process's own)."""
    environment = dict(os.environ if env is None else env)
    if os.environ.get(_SWITCH) == "0" or _needs_exec(environment):
        return subprocess.Popen(
            [sys.executable, "-m", module, *args], cwd=cwd, env=environment, stdin=stdin,
            stdout=stdout, stderr=stderr, text=text,
        )
    return _zygote().spawn(module, list(args), environment,
                           str(cwd) if cwd is not None else os.getcwd(),
                           (stdin, stdout, stderr), text)


def _needs_exec(environment: Mapping[str, str]) -> bool:
    # The zygote's import path is this process's, with the project root (see _Zygote).
    zygote = {**os.environ, "PYTHONPATH": os.environ.get("PYTHONPATH", str(ROOT))}
    return any(key.startswith(_EXEC_ONLY) and environment.get(key) != zygote.get(key)
               for key in set(environment) | set(zygote))


class Forked:
    """A worker forked by the zygote: ``pid``, ``stdin``/``stdout``/``stderr`` (where asked
    for as pipes), ``returncode`` (negative: the signal that ended it), ``poll``, ``wait``,
    ``communicate``, ``send_signal``, ``terminate``, ``kill``, as on ``subprocess.Popen``."""

    def __init__(self, pid: int, streams: tuple[IO[Any] | None, IO[Any] | None,
                                                 IO[Any] | None], args: list[str]) -> None:
        self.pid = pid
        self.stdin, self.stdout, self.stderr = streams
        self.args = args
        self.returncode: int | None = None
        self._ended = threading.Event()

    def __repr__(self) -> str:
        return f"<Forked pid={self.pid} returncode={self.returncode}>"

    def _exited(self, status: int) -> None:
        self.returncode = os.waitstatus_to_exitcode(status)
        self._ended.set()

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if not self._ended.wait(timeout):
            raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
        assert self.returncode is not None
        return self.returncode

    def communicate(self, input: Any = None, timeout: float | None = None
                    ) -> tuple[Any, Any]:
        if input is not None and self.stdin is not None:
            with contextlib.suppress(BrokenPipeError):
                self.stdin.write(input)
        if self.stdin is not None:
            with contextlib.suppress(BrokenPipeError, OSError):
                self.stdin.close()
        outputs: dict[str, Any] = {}

        def drain(which: str, stream: IO[Any]) -> None:
            outputs[which] = stream.read()
            stream.close()

        readers = [threading.Thread(target=drain, args=(which, stream), daemon=True)
                   for which, stream in (("out", self.stdout), ("err", self.stderr))
                   if stream is not None and not stream.closed]
        for reader in readers:
            reader.start()
        self.wait(timeout)
        for reader in readers:
            # The worker ended, but a grandchild may still hold its pipe open.
            reader.join(timeout if timeout is not None else None)
        return outputs.get("out"), outputs.get("err")

    def send_signal(self, number: int) -> None:
        if self.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, number)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def __enter__(self) -> Forked:
        return self

    def __exit__(self, *_: object) -> None:
        for stream in (self.stdin, self.stdout, self.stderr):
            if stream is not None:
                stream.close()
        self.wait()


class _Zygote:
    """This process's end of the zygote: requests out, pids and exit statuses back."""

    def __init__(self) -> None:
        self.owner = os.getpid()
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self._socket = mine
        self._process = subprocess.Popen(
            [sys.executable, "-m", "tests.forked", str(theirs.fileno())],
            pass_fds=(theirs.fileno(),), cwd=ROOT, stdin=subprocess.DEVNULL,
            env={**os.environ, "PYTHONPATH": os.environ.get("PYTHONPATH", str(ROOT))},
        )
        theirs.close()
        self._send_lock = threading.Lock()
        self._started: dict[int, Any] = {}
        self._children: dict[int, Forked] = {}
        self._early: dict[int, int] = {}
        self._lock = threading.Lock()
        self._condition = threading.Condition(self._lock)
        self._serial = 0
        threading.Thread(target=self._read, name="zygote-reader", daemon=True).start()

    def spawn(self, module: str, args: list[str], environment: dict[str, str], cwd: str,
              streams: tuple[int | IO[Any] | None, ...], text: bool) -> Forked:
        theirs: list[int] = []
        ours: list[IO[Any] | None] = []
        close_after: list[int] = []
        for index, stream in enumerate(streams):
            if stream == subprocess.PIPE:
                read, write = os.pipe()
                child, parent = (read, write) if index == 0 else (write, read)
                theirs.append(child)
                close_after.append(child)
                mode = "w" if index == 0 else "r"
                # Kept open past this call, as Popen's pipes are: Forked closes them.
                if text:
                    ours.append(open(parent, mode, buffering=1 if index == 0 else -1,  # noqa: SIM115
                                     encoding="utf-8", errors="strict"))
                else:
                    ours.append(open(parent, mode + "b",  # noqa: SIM115
                                     buffering=0 if index == 0 else -1))
            elif stream == subprocess.DEVNULL:
                fd = os.open(os.devnull, os.O_RDWR)
                theirs.append(fd)
                close_after.append(fd)
                ours.append(None)
            elif stream is None:
                theirs.append(index)
                ours.append(None)
            elif isinstance(stream, int):
                theirs.append(stream)
                ours.append(None)
            else:
                theirs.append(stream.fileno())
                ours.append(None)
        with self._lock:
            self._serial += 1
            serial = self._serial
        request = pickle.dumps((serial, module, args, environment, cwd))
        try:
            with self._send_lock:
                socket.send_fds(self._socket, [_HEADER.pack(len(request)) + request], theirs)
            with self._condition:
                while serial not in self._started:
                    if not self._condition.wait(30):
                        raise RuntimeError("the zygote did not answer a fork request")
                pid = self._started.pop(serial)
        finally:
            for fd in close_after:
                os.close(fd)
        if isinstance(pid, str):
            raise RuntimeError(f"the zygote could not fork: {pid}")
        forked = Forked(pid, (ours[0], ours[1], ours[2]), [module, *args])
        with self._lock:
            self._children[pid] = forked
            early = self._early.pop(pid, None)
        if early is not None:
            forked._exited(early)
        return forked

    def _read(self) -> None:
        buffer = b""
        while True:
            try:
                chunk = self._socket.recv(65536)
            except OSError:
                chunk = b""
            if not chunk:
                return
            buffer += chunk
            while len(buffer) >= _HEADER.size:
                (size,) = _HEADER.unpack_from(buffer)
                if len(buffer) < _HEADER.size + size:
                    break
                message = pickle.loads(buffer[_HEADER.size:_HEADER.size + size])
                buffer = buffer[_HEADER.size + size:]
                self._handle(message)

    def _handle(self, message: tuple[str, int, Any]) -> None:
        what, key, value = message
        with self._condition:
            if what == "started":
                self._started[key] = value
                self._condition.notify_all()
                return
            forked = self._children.pop(key, None)
            if forked is None:
                self._early[key] = value  # ended before spawn() filed it
        if forked is not None:
            forked._exited(value)


_current: _Zygote | None = None
_current_lock = threading.Lock()


def _zygote() -> _Zygote:
    global _current
    with _current_lock:
        # A forked test process must not share its parent's zygote (nor its socket).
        if _current is None or _current.owner != os.getpid():
            _current = _Zygote()
        return _current


# ---- the zygote's side -------------------------------------------------------------------

def _preload() -> None:
    """Import what workers import: tenure, both flavours of every backend (and so their
    drivers), asyncio; not the worker modules themselves (``runpy`` warns when the module it
    is to run as ``__main__`` was imported already)."""
    import asyncio  # noqa: F401

    import tenure

    backends = pathlib.Path(tenure.__file__).parent / "backends"
    for package in sorted(path.name for path in backends.iterdir() if path.is_dir()
                          and not path.name.startswith("_")):
        for flavour in ("_sync", "_async"):
            with contextlib.suppress(ImportError):
                importlib.import_module(f"tenure.backends.{package}.{flavour}")
    for module in ("tenure.cli", "safety.history", "safety.resource"):
        with contextlib.suppress(ImportError):
            importlib.import_module(module)


def _serve(fd: int) -> None:
    _preload()
    channel = socket.socket(fileno=fd)
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_write, False)
    signal.set_wakeup_fd(wake_write)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    buffer = b""
    fds: list[int] = []

    def send(message: tuple[str, int, Any]) -> None:
        data = pickle.dumps(message)
        channel.sendall(_HEADER.pack(len(data)) + data)

    while True:
        ready, _, _ = select.select([channel, wake_read], [], [])
        if wake_read in ready:
            os.read(wake_read, 4096)
        while True:  # reap every worker that ended
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            send(("exited", pid, status))
        if channel not in ready:
            continue
        data, received, _, _ = socket.recv_fds(channel, 65536, 16)
        if not data:
            return  # the test process is gone
        buffer += data
        fds += received
        while len(buffer) >= _HEADER.size:
            (size,) = _HEADER.unpack_from(buffer)
            if len(buffer) < _HEADER.size + size:
                break
            serial, module, args, environment, cwd = pickle.loads(
                buffer[_HEADER.size:_HEADER.size + size])
            buffer = buffer[_HEADER.size + size:]
            streams, fds = fds[:3], fds[3:]
            try:
                pid = os.fork()
            except OSError as exc:
                send(("started", serial, str(exc)))
            else:
                if pid == 0:
                    channel.close()
                    os.close(wake_read)
                    os.close(wake_write)
                    _run(module, args, environment, cwd, streams)
                send(("started", serial, pid))
            for stream in streams:
                os.close(stream)


def _run(module: str, args: list[str], environment: dict[str, str], cwd: str,
         streams: Iterable[int]) -> None:
    """In the forked worker: become ``python -m module *args`` and never return."""
    code = 1
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        for target, fd in enumerate(streams):
            if fd != target:
                os.dup2(fd, target)
        sys.stdin = io.TextIOWrapper(io.BufferedReader(io.FileIO(0, "r", closefd=False)),
                                     encoding="utf-8")
        sys.stdout = io.TextIOWrapper(io.BufferedWriter(io.FileIO(1, "w", closefd=False)),
                                      encoding="utf-8")
        sys.stderr = io.TextIOWrapper(io.BufferedWriter(io.FileIO(2, "w", closefd=False)),
                                      encoding="utf-8", errors="backslashreplace",
                                      line_buffering=True)
        os.environ.clear()
        os.environ.update(environment)
        os.chdir(cwd)
        random.seed()
        sys.argv = [module, *args]
        import runpy

        try:
            runpy.run_module(module, run_name="__main__", alter_sys=True)
            code = 0
        except SystemExit as exc:
            if exc.code is None:
                code = 0
            elif isinstance(exc.code, int):
                code = exc.code
            else:
                print(exc.code, file=sys.stderr)
                code = 1
        except BaseException:
            traceback.print_exc()
            code = 1
        # What the interpreter does on its way out: wait for non-daemon threads, run the
        # exit handlers, flush.
        threading_shutdown = getattr(threading, "_shutdown", None)
        if threading_shutdown is not None:
            threading_shutdown()
        atexit._run_exitfuncs()
    except BaseException:
        with contextlib.suppress(BaseException):
            traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(BaseException):
                stream.flush()
        os._exit(code)


if __name__ == "__main__":
    _serve(int(sys.argv[1]))
