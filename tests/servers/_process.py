"""Start, probe, pause, kill and stop one server process, by PID."""

from __future__ import annotations

import contextlib
import fcntl
import os
import pathlib
import random
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Sequence

__all__ = [
    "ManagedServer",
    "ServerFailed",
    "cpu_seconds",
    "descendants",
    "free_port",
    "require_binary",
    "stop_processes",
    "thread_states",
    "wait_for_port",
]


class ServerFailed(RuntimeError):
    """A server could not be started: the test run fails (never skips)."""


# Server ports come from below the kernel's ephemeral range (32768-60999 by default), so a
# client connection's local port can never take a server's port between the probe and the
# server's own bind. Each candidate is claimed with an flock on a file named after it, held
# until this process exits: test processes started side by side (pytest-xdist workers, two
# checkouts' runs) then never hand out the same port, whatever order they probe in.
_PORT_RANGE = range(20000, 32000)
# A fixed path, not under $TMPDIR: runs with different temp dirs must see the same claims.
_PORT_CLAIMS = pathlib.Path("/tmp/tenure-test-ports")
_claimed: dict[int, int] = {}  # port -> the fd holding its claim


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now, and claimed by this process for its whole life
    (other processes share this machine)."""
    _PORT_CLAIMS.mkdir(mode=0o777, exist_ok=True)
    start = random.randrange(len(_PORT_RANGE))
    for offset in range(len(_PORT_RANGE)):
        port = _PORT_RANGE[(start + offset) % len(_PORT_RANGE)]
        if port in _claimed:
            continue
        claim = os.open(_PORT_CLAIMS / str(port), os.O_RDWR | os.O_CREAT, 0o666)
        try:
            fcntl.flock(claim, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(claim)
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:  # taken by something that does not claim ports
                os.close(claim)
                continue
        _claimed[port] = claim
        return port
    raise ServerFailed(f"no free port left in {_PORT_RANGE}")


def descendants(root: int) -> list[int]:
    """Every process below ``root`` (children, their children, ...), by /proc's parent links:
    a server's processes may each sit in a session of their own, which a process group would
    miss."""
    parents: dict[int, int] = {}
    for entry in pathlib.Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                parents[int(entry.name)] = int(_stat_fields(entry / "stat")[1])
    found: list[int] = []
    frontier = [root]
    while frontier:
        parent = frontier.pop()
        children = [pid for pid, ppid in parents.items() if ppid == parent]
        found += children
        frontier += children
    return found


def _stat_fields(stat: pathlib.Path) -> list[str]:
    """The fields of a /proc stat file after the parenthesised command name (which may hold
    spaces): the state first, then the parent's PID."""
    return stat.read_text().rsplit(")", 1)[1].split()


_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """CPU seconds ``pid`` spent, with what its reaped children spent (utime, stime, cutime,
    cstime: stat's fields 14-17, 12-15 after the name); 0 once the process is gone."""
    try:
        fields = _stat_fields(pathlib.Path(f"/proc/{pid}/stat"))
        return sum(int(value) for value in fields[11:15]) / _TICKS
    except (OSError, IndexError, ValueError):
        return 0.0


def thread_states(pid: int) -> list[str]:
    """The state letter of every thread of ``pid`` ("T" stopped, "Z" zombie, ...); none once
    the process is gone."""
    states = []
    for task in pathlib.Path(f"/proc/{pid}/task").glob("*"):
        with contextlib.suppress(OSError, IndexError):
            states.append(_stat_fields(task / "stat")[0])
    return states


def stop_processes(list_pids: Callable[[], list[int]], timeout: float = 10.0) -> None:
    """SIGSTOP every process ``list_pids`` names and return once every thread of each is
    stopped. kill() returns before a multi-threaded process has finished stopping, and a
    request slipped in meanwhile would still be answered. The list is read again on every
    pass: a parent can fork a child (a PostgreSQL backend for a new connection, a worker)
    after it was listed and before its own stop, and that child got no signal; CI once
    waited 10 s for such a child.
    """
    signalled: set[int] = set()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pids = list_pids()
        for pid in set(pids) - signalled:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGSTOP)
            signalled.add(pid)
        states = [state for pid in pids for state in thread_states(pid)]
        stopped = all(state in ("T", "t", "Z", "X") for state in states)
        # Listed once more after all stopped: a child forked just before its parent stopped.
        if stopped and set(list_pids()) <= signalled:
            return
        time.sleep(0.01)
    raise ServerFailed(f"processes {sorted(signalled)} did not stop within {timeout} s")


def require_binary(name: str, *candidates: str) -> str:
    """The path of a server binary, or ServerFailed naming the package to install."""
    for candidate in (name, *candidates):
        found = shutil.which(candidate) or (candidate if os.access(candidate, os.X_OK) else None)
        if found:
            return found
    raise ServerFailed(
        f"{name} not found: run scripts/install-servers (the test command does) as root"
    )


def wait_for_port(port: int, timeout: float = 30.0, host: str = "127.0.0.1") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=0.5):
            return
        time.sleep(0.05)
    raise ServerFailed(f"nothing listens on {host}:{port} after {timeout} s")


class ManagedServer:
    """One server process. ``ready`` is a probe that returns without raising once the server
    really answers (a PING, a SELECT 1), not a sleep."""

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        workdir: pathlib.Path,
        ready: Callable[[], None],
        *,
        user: str | None = None,
        env: dict[str, str] | None = None,
        start_timeout: float = 60.0,
    ) -> None:
        self.name = name
        self.argv = list(argv)
        self.workdir = workdir
        self.ready = ready
        self.user = user
        self.env = env
        self.start_timeout = start_timeout
        self.process: subprocess.Popen[bytes] | None = None
        self.log_path = workdir / f"{name}.log"
        self._started_elsewhere: int | None = None
        """The PID of a server another process started (this is its unpickled copy)."""

    def __getstate__(self) -> dict[str, object]:
        # Another process (a pytest-xdist worker, the controller) gets the server's PID: it
        # can signal and stop the server, not wait on a child that is not its own, and not
        # restart it (the readiness probe is a closure that does not pickle).
        state = {key: value for key, value in self.__dict__.items()
                 if key not in ("process", "ready")}
        state["_started_elsewhere"] = self.pid if self.running() else None
        return state

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__dict__.update(state)
        self.process = None
        self.ready = _not_restartable

    @property
    def pid(self) -> int:
        if self.process is not None:
            return self.process.pid
        if self._started_elsewhere is not None:
            return self._started_elsewhere
        raise ServerFailed(f"{self.name} is not running")

    def running(self) -> bool:
        if self.process is not None:
            return self.process.poll() is None
        if self._started_elsewhere is None:
            return False
        return _alive(self._started_elsewhere)

    def start(self) -> ManagedServer:
        argv = self.argv
        if self.user is not None and os.geteuid() == 0:
            argv = ["runuser", "-u", self.user, "--", *argv]
        log = self.log_path.open("ab")
        self.process = subprocess.Popen(
            argv, cwd=self.workdir, stdout=log, stderr=subprocess.STDOUT,
            env={**os.environ, **(self.env or {})}, start_new_session=True,
        )
        log.close()
        deadline = time.monotonic() + self.start_timeout
        last_error: BaseException | None = None
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise ServerFailed(
                    f"{self.name} exited with {self.process.returncode}: {self.tail()}"
                )
            try:
                self.ready()
                return self
            except Exception as exc:
                last_error = exc
                time.sleep(0.05)
        self.stop()
        raise ServerFailed(
            f"{self.name} not ready after {self.start_timeout} s: {last_error}; {self.tail()}"
        )

    def tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def pause(self) -> None:
        os.kill(self.pid, signal.SIGSTOP)

    def resume(self) -> None:
        os.kill(self.pid, signal.SIGCONT)

    def kill(self) -> None:
        """SIGKILL: no clean shutdown, no persistence flush."""
        if self.running():
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
            self._wait(10)

    def stop(self, timeout: float = 15.0) -> None:
        """SIGTERM, then SIGKILL after ``timeout``; also resumes a paused server first."""
        if not self.running():
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGCONT)
            os.kill(self.pid, signal.SIGTERM)
        try:
            self._wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()

    def _wait(self, timeout: float) -> None:
        if self.process is not None:
            self.process.wait(timeout)
            return
        # Not our child: watch it go (a zombie counts as gone; its parent reaps it).
        deadline = time.monotonic() + timeout
        while self.running():
            if time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(self.argv, timeout)
            time.sleep(0.02)

    def restart(self) -> ManagedServer:
        self.stop()
        return self.start()


def _not_restartable() -> None:
    raise ServerFailed("a server started by another process cannot be restarted here")


def _alive(pid: int) -> bool:
    """``pid`` runs (a zombie does not: it only waits for its parent to reap it)."""
    try:
        return _stat_fields(pathlib.Path(f"/proc/{pid}/stat"))[0] not in ("Z", "X")
    except (OSError, IndexError):
        return False
