"""A real PostgreSQL for the tests: ``initdb`` into a temp dir, ``postgres`` on a free
loopback port, trust authentication on 127.0.0.1, probed with a real ``SELECT 1``.

``initdb`` and ``postgres`` refuse to run as root, so both run as the ``postgres`` user
(``runuser``) in a temp dir that user owns. ``initdb`` runs once per session into a template
cluster; every server copies it, so a restartable per-test server costs a copy, not an initdb.

Durability settings trade power-loss safety (``fsync=off``) for speed; a killed server
process still loses nothing committed, because committed WAL is in the OS page cache.
"""

from __future__ import annotations

import contextlib
import dataclasses
import glob
import os
import pathlib
import pwd
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Iterator

from tests.servers._process import (
    ManagedServer,
    ServerFailed,
    descendants,
    free_port,
    require_binary,
    stop_processes,
)
from tests.servers._templated import templated_fixtures

__all__ = ["PostgresServer", "postgresql_url", "restartable_postgresql"]

USER = "postgres"
DATABASE = "tenure_test"


def _binary(name: str) -> str:
    # Debian installs the server binaries under /usr/lib/postgresql/<major>/bin, off PATH.
    candidates = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), reverse=True)
    return require_binary(name, *candidates)


def _own(path: pathlib.Path) -> None:
    account = pwd.getpwnam(USER)
    if os.geteuid() == 0:
        os.chown(path, account.pw_uid, account.pw_gid)


def _run_as_postgres(argv: list[str], cwd: pathlib.Path) -> None:
    if os.geteuid() == 0:
        argv = ["runuser", "-u", USER, "--", *argv]
    result = subprocess.run(
        argv, check=False, cwd=cwd, capture_output=True, text=True, timeout=120
    )
    if result.returncode != 0:
        raise ServerFailed(f"{argv[-1]} failed ({result.returncode}): {result.stderr[-2000:]}")


@dataclasses.dataclass
class PostgresServer:
    """One running cluster: its URL (database ``tenure_test``), and the process to stop,
    pause, kill or restart."""

    process: ManagedServer
    port: int
    workdir: pathlib.Path

    @property
    def url(self) -> str:
        return f"postgresql://{USER}@127.0.0.1:{self.port}/{DATABASE}"

    def stop(self) -> None:
        """Fast shutdown (SIGINT): SIGTERM would wait for every client to disconnect."""
        process = self.process.process
        if process is not None and process.poll() is None:
            # The process started is runuser, which does not pass SIGINT on: signal the
            # postmaster itself, whose PID heads postmaster.pid.
            self.resume()  # a paused server can't shut down
            with contextlib.suppress(OSError, ValueError, IndexError):
                pid = int((self.workdir / "data" / "postmaster.pid").read_text().split()[0])
                os.kill(pid, signal.SIGINT)
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(30)
        self.process.stop()

    def _server_pids(self) -> list[int]:
        # The postmaster and its backends, each in a session of its own (setsid). runuser
        # itself is left alone so that it reaps the postmaster.
        return descendants(self.process.pid)

    def _signal_all(self, signum: int) -> None:
        for pid in self._server_pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signum)

    def pause(self) -> None:
        """SIGSTOP every process of the server (postmaster and backends): connections stay
        open and nothing answers, the hardest kind of dead server."""
        stop_processes(self._server_pids)

    def resume(self) -> None:
        # runuser stops itself when its child stops: wake it too.
        self._signal_all(signal.SIGCONT)
        os.killpg(self.process.pid, signal.SIGCONT)

    def kill(self) -> None:
        """SIGKILL the whole server, backends included: a crash, no shutdown checkpoint."""
        self._signal_all(signal.SIGKILL)
        if self.process.process is not None:
            self.process.process.wait(10)

    def restart(self) -> None:
        """Stop cleanly and start again on the same port and data directory."""
        self.stop()
        self.process.start()


def _tempdir(prefix: str) -> pathlib.Path:
    path = pathlib.Path(tempfile.mkdtemp(prefix=prefix))
    path.chmod(0o700)
    _own(path)
    return path


def _template() -> pathlib.Path:
    """An initialised cluster with the test database in it, stopped, to copy from."""
    workdir = _tempdir("tenure-pg-template-")
    data = workdir / "data"
    _run_as_postgres(
        [_binary("initdb"), "-D", str(data), "-U", USER, "--auth=trust", "--no-sync",
         "-E", "UTF8", "--locale=C"],
        workdir,
    )
    server = _start(workdir, free_port())
    try:
        import psycopg

        with psycopg.connect(
            f"postgresql://{USER}@127.0.0.1:{server.port}/postgres", autocommit=True,
            connect_timeout=5,
        ) as connection:
            connection.execute(f"CREATE DATABASE {DATABASE}")
    finally:
        server.stop()
    return workdir


def _start(workdir: pathlib.Path, port: int, env: dict[str, str] | None = None
           ) -> PostgresServer:
    data = workdir / "data"
    url = f"postgresql://{USER}@127.0.0.1:{port}/postgres"

    def ready() -> None:
        import psycopg

        with psycopg.connect(url, connect_timeout=2) as connection:
            connection.execute("SELECT 1").fetchone()

    process = ManagedServer(
        f"postgres-{port}",
        [
            _binary("postgres"), "-D", str(data), "-p", str(port),
            "-c", "listen_addresses=127.0.0.1",
            "-c", f"unix_socket_directories={workdir}",
            "-c", "max_connections=300",
            "-c", "shared_buffers=32MB",
            "-c", "fsync=off",
            "-c", "full_page_writes=off",
            "-c", "log_min_messages=warning",
        ],
        workdir,
        ready,
        user=USER,
        env=env,
    )
    process.start()
    return PostgresServer(process, port, workdir)


def _copy(template: pathlib.Path) -> pathlib.Path:
    workdir = _tempdir("tenure-pg-")
    data = workdir / "data"
    # cp -a keeps ownership and the 0700 mode postgres insists on for its data directory.
    subprocess.run(["cp", "-a", str(template / "data"), str(data)], check=True)
    return workdir


@contextlib.contextmanager
def _server(template: pathlib.Path, env: dict[str, str] | None = None
            ) -> Iterator[PostgresServer]:
    workdir = _copy(template)
    server: PostgresServer | None = None
    try:
        server = _start(workdir, free_port(), env)
        yield server
    finally:
        if server is not None:
            server.stop()
        shutil.rmtree(workdir, ignore_errors=True)


postgresql_template, postgresql_server, postgresql_url, restartable_postgresql = (
    templated_fixtures("postgresql", _template, _server)
)
