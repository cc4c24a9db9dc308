"""The controller's side of a scenario run: starting worker processes, talking to them, and
where their histories go.

Every worker is a real process (``python -m safety.workers``), started in the run's own
directory, stopped by its PID (never by name), and bounded twice: by the controller's
timeouts on every exchange, and by its own lifetime watchdog.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import pathlib
import queue
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, Protocol

from tests.forked import popen

from safety.history import History, Recorder

if TYPE_CHECKING:
    from safety.clock import WallClock

__all__ = ["ROOT", "ClockJump", "ClockSetup", "Run", "ServerControl", "Target", "WorkerFailed",
           "WorkerProcess"]

ROOT = pathlib.Path(__file__).resolve().parent.parent


class WorkerFailed(RuntimeError):
    """A worker died, answered nonsense, or stayed silent past its timeout."""


class ServerControl(Protocol):
    """What scenario 5 needs of a server: restart it in place (same port, same data)."""

    def restart(self) -> object: ...


@dataclasses.dataclass
class Target:
    """One backend under test: its name in the backend table, a URL reaching it, and (for
    servers the harness started itself) the handle to restart it."""

    backend: str
    url: str
    server: ServerControl | None = None
    variant: str = ""
    """How this server was configured, when the backend's promises depend on it."""
    durable: bool | None = None
    """Overrides the backend's declared ``fences_survive_restart`` and
    ``leases_survive_restart`` for this server's configuration (a Redis with AOF on every
    write keeps its keys across a restart; the backend declares what a default Redis does)."""
    leases_wiped: bool | None = None
    """Whether a restart surely forgets every lease (so every holder across it must be told);
    None: as ``durable`` and the declared capabilities say. Restarting a minority of Redlock's
    nodes forgets none: the others still hold a majority."""
    clock: ClockJump | None = None
    """For scenario 10: whose wall clock the harness can move, and what that may break."""
    worker_env: dict[str, str] = dataclasses.field(default_factory=dict)
    """Environment every worker process of a run on this target starts with."""


@dataclasses.dataclass(frozen=True)
class ClockSetup:
    """Whose wall clock scenario 10 jumps, and whether a forward jump of it can end a lease
    early (then the overlap is a limit the record shows; else it is a violation)."""

    moves: str
    """Whose clock it is, for the report: "server clock", "the clients", ..."""
    ends_leases: bool
    """Whether expiry is judged by that clock."""
    moves_workers: bool = False
    """The worker processes run on it (the clients' clocks; SQLite's host clock): checked by
    the victim's own reading. Otherwise the servers run on it."""
    nodes: int = 0
    """Redlock: how many of its nodes run on the moved clock."""


@dataclasses.dataclass
class ClockJump:
    """A clock of a ``ClockSetup``, ready to move. Every jump is checked to have taken, so a
    clock that never moved cannot pass for one that moved without harm."""

    clock: WallClock
    setup: ClockSetup
    read: Callable[[], list[float]] | None = None
    """The moved servers' clocks, read directly, Unix seconds (None: the workers' clock)."""
    held_everywhere: Callable[[str], bool] | None = None
    """Redlock with fewer than a majority of nodes moved: whether the named lock's lease is
    on every node. Only then must a jump end nothing: a lease a node's contender kept from
    (granted by a bare majority) is ended by a jump on one of its nodes, Redlock's
    documented limit, and the scenario takes such a section again instead of jumping."""


class WorkerProcess:
    def __init__(self, command: str, config: dict[str, Any], workdir: pathlib.Path,
                 env: dict[str, str] | None = None) -> None:
        self.command = command
        self.worker = str(config["worker"])
        self._history_path = pathlib.Path(config["history"])
        self._stderr_path = workdir / f"{self.worker}.stderr"
        with self._stderr_path.open("wb") as stderr:
            # Forked from a warm interpreter where that can stand in for a new one (not with
            # a moved clock's LD_PRELOAD): tests.forked.
            self.process = popen(
                "safety.workers", [command, json.dumps(config)], cwd=workdir,
                env={**os.environ, **(env or {}), "PYTHONPATH": str(ROOT)},
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr, text=True,
            )
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._reader = threading.Thread(target=self._read, name=f"read-{self.worker}",
                                        daemon=True)
        self._reader.start()

    def __repr__(self) -> str:
        return f"<worker {self.worker} {self.command} pid={self.process.pid}>"

    @property
    def pid(self) -> int:
        return self.process.pid

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self._lines.put(line)
        self._lines.put(None)

    def stderr_tail(self, size: int = 1500) -> str:
        try:
            return self._stderr_path.read_text(errors="replace")[-size:]
        except OSError:
            return ""

    def send(self, *words: object) -> None:
        assert self.process.stdin is not None
        try:
            self.process.stdin.write(" ".join(map(str, words)) + "\n")
            self.process.stdin.flush()
        except (BrokenPipeError, OSError) as exc:
            raise WorkerFailed(f"{self}: cannot send {words}: {self.stderr_tail()}") from exc

    def expect(self, timeout: float) -> dict[str, Any]:
        """The worker's next report."""
        try:
            line = self._lines.get(timeout=timeout)
        except queue.Empty:
            raise WorkerFailed(f"{self}: no report within {timeout} s; "
                               f"stderr: {self.stderr_tail()}") from None
        return self._parsed(line)

    def remaining_reports(self, timeout: float) -> list[dict[str, Any]]:
        """Every report still unread once the worker's output has ended (it was killed or
        exited), waiting up to ``timeout`` seconds for that end."""
        found: list[dict[str, Any]] = []
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            try:
                line = self._lines.get(timeout=left)
            except queue.Empty:
                break
            if line is None:
                break
            found.append(self._parsed(line))
        return found

    def expect_progressing(self, stall: float) -> dict[str, Any]:
        """The worker's next report, waited for as long as its history keeps growing: a slow
        backend (the MongoDB stand-in under 16 processes) is not a hang, a worker that
        recorded nothing for ``stall`` seconds is."""
        recorded = -1
        while True:
            try:
                line = self._lines.get(timeout=stall)
            except queue.Empty:
                now = self._history_size()
                if now == recorded:
                    raise WorkerFailed(f"{self}: recorded nothing for {stall} s; "
                                       f"stderr: {self.stderr_tail()}") from None
                recorded = now
                continue
            return self._parsed(line)

    def _history_size(self) -> int:
        try:
            return self._history_path.stat().st_size
        except OSError:
            return 0

    def _parsed(self, line: str | None) -> dict[str, Any]:
        if line is None:
            self.process.wait(5)
            raise WorkerFailed(f"{self}: exited ({self.process.returncode}) without a report; "
                               f"stderr: {self.stderr_tail()}")
        try:
            report: dict[str, Any] = json.loads(line)
        except ValueError:
            raise WorkerFailed(f"{self}: not a report: {line!r}") from None
        return report

    def signal(self, signum: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.process.pid, signum)

    def kill(self) -> None:
        """SIGKILL and reap."""
        if self.process.poll() is None:
            self.signal(signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(10)
        self._close()

    def stop(self, timeout: float = 30.0) -> None:
        """Ask it to finish (SIGTERM, then its stdin closes), SIGKILL if it does not."""
        if self.process.poll() is None:
            self.signal(signal.SIGCONT)
            self.signal(signal.SIGTERM)
            with contextlib.suppress(OSError):
                assert self.process.stdin is not None
                self.process.stdin.close()
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.signal(signal.SIGKILL)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self.process.wait(10)
        self._close()

    def _close(self) -> None:
        self._reader.join(5)  # the process is gone: its stdout reaches EOF
        for pipe in (self.process.stdin, self.process.stdout):
            if pipe is not None and not self._reader.is_alive():
                with contextlib.suppress(OSError):
                    pipe.close()


class Run:
    """One scenario run on one backend: its directory, workers and controller recorder."""

    def __init__(self, target: Target, workdir: pathlib.Path, seed: int,
                 lifetime: float) -> None:
        self.target = target
        self.workdir = workdir
        self.seed = seed
        self.lifetime = lifetime
        workdir.mkdir(parents=True, exist_ok=True)
        self.recorder = Recorder(workdir / "controller.jsonl")
        self._workers: list[WorkerProcess] = []
        self._children: list[Run] = []
        self._count = 0
        self.tag = uuid.uuid4().hex[:10]

    def child(self, name: str) -> Run:
        """A sub-run with its own directory and history (one variant of a scenario)."""
        child = Run(self.target, self.workdir / name, self.seed, self.lifetime)
        self._children.append(child)
        return child

    def name(self, what: str) -> str:
        """A lock name of this run only: runs may share a server."""
        return f"safety:{what}:{self.tag}"

    def spawn(self, command: str, **config: Any) -> WorkerProcess:
        self._count += 1
        worker = str(config.pop("worker", f"{command}{self._count}"))
        full = {
            "url": self.target.url,
            "worker": worker,
            "history": str(self.workdir / f"{worker}.jsonl"),
            "seed": self.seed * 1000 + self._count,
            "lifetime": self.lifetime,
            **config,
        }
        process = WorkerProcess(command, full, self.workdir, self.target.worker_env)
        self._workers.append(process)
        return process

    def history(self) -> History:
        return History.load(self.workdir)

    def close(self) -> None:
        for child in self._children:
            child.close()
        for worker in self._workers:
            worker.kill()
        self.recorder.close()

    @contextlib.contextmanager
    def stopping(self, *workers: WorkerProcess) -> Iterator[None]:
        """Stop these workers at the end of the block, whatever happens in it."""
        try:
            yield
        finally:
            for worker in workers:
                worker.stop()
