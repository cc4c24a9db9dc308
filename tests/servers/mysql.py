"""A real MariaDB for the tests: ``mariadb-install-db`` into a temp datadir, ``mariadbd`` on a
free loopback port, probed with a real ``SELECT 1``.

The install runs once per session into a template datadir, in which a bootstrap server
creates the ``tenure_test`` database and a password-protected ``tenure`` user (so the tests
go through real authentication, with a password that needs URL quoting). Every server copies
the template, so a restartable per-test server costs a copy, not an install.

``innodb_flush_log_at_trx_commit=2`` writes the log to the OS at every commit and syncs it
once a second: a killed server process loses nothing committed, a power cut could.
"""

from __future__ import annotations

import contextlib
import dataclasses
import pathlib
import shutil
import subprocess
import tempfile
import urllib.parse
from collections.abc import Iterator

from tests.servers._process import (
    ManagedServer,
    ServerFailed,
    free_port,
    require_binary,
    stop_processes,
)
from tests.servers._templated import templated_fixtures

__all__ = ["MariaDBServer", "mysql_url", "restartable_mysql"]

DATABASE = "tenure_test"
USER = "tenure"
PASSWORD = "s3cret pass%word"
"""Has a space and a percent sign: the URL must carry it quoted, and tenure must unquote it."""


@dataclasses.dataclass
class MariaDBServer:
    """One running server: its URL, and the process to stop, pause, kill or restart."""

    process: ManagedServer
    port: int
    workdir: pathlib.Path

    @property
    def url(self) -> str:
        password = urllib.parse.quote(PASSWORD, safe="")
        return f"mysql://{USER}:{password}@127.0.0.1:{self.port}/{DATABASE}"

    @property
    def socket(self) -> pathlib.Path:
        return self.workdir / "mysqld.sock"

    def stop(self) -> None:
        self.process.stop(timeout=30)

    def restart(self) -> None:
        """Stop cleanly and start again on the same port and datadir."""
        self.stop()
        self.process.start()

    def pause(self) -> None:
        """SIGSTOP: connections stay open and nothing answers."""
        stop_processes(lambda: [self.process.pid])

    def resume(self) -> None:
        self.process.resume()

    def kill(self) -> None:
        """SIGKILL: a crash; InnoDB recovers from its log at the next start."""
        self.process.kill()


def private_tmpdir(workdir: pathlib.Path) -> pathlib.Path:
    """The server's own temporary directory. mariadbd's default is the shared /tmp, where its
    internal temporary tables (#sql-temptable-*) can be removed under it by whatever else
    cleans /tmp: a CI run's bootstrap once died on "Error on delete of
    '/tmp/#sql-temptable-...MAI'" while the two driver-floor runs started side by side."""
    tmpdir = workdir / "tmp"
    tmpdir.mkdir(exist_ok=True)
    return tmpdir


def _server_process(workdir: pathlib.Path, port: int, ready_as_root: bool = False,
                    env: dict[str, str] | None = None) -> ManagedServer:
    socket_path = workdir / "mysqld.sock"

    def ready() -> None:
        import pymysql

        if not socket_path.exists():
            # Connecting before the server made its socket would leak PyMySQL's socket.
            raise ServerFailed("no socket yet")
        if ready_as_root:  # the bootstrap: root over the socket (unix_socket auth)
            connection = pymysql.connect(unix_socket=str(socket_path), user="root",
                                         connect_timeout=2, read_timeout=5)
        else:
            connection = pymysql.connect(host="127.0.0.1", port=port, user=USER,
                                         password=PASSWORD, database=DATABASE,
                                         connect_timeout=2, read_timeout=5)
        try:
            with connection.cursor() as cursor:
                cursor.execute("SELECT 1")
        finally:
            connection.close()

    return ManagedServer(
        f"mariadbd-{port}",
        [
            require_binary("mariadbd", "/usr/sbin/mariadbd"),
            "--no-defaults",
            "--user=root",
            f"--datadir={workdir / 'data'}",
            f"--tmpdir={private_tmpdir(workdir)}",
            f"--socket={socket_path}",
            f"--port={port}",
            "--bind-address=127.0.0.1",
            f"--pid-file={workdir / 'mysqld.pid'}",
            f"--log-error={workdir / 'mysqld.err'}",
            "--skip-name-resolve",
            "--skip-log-bin",
            "--max-connections=500",
            "--innodb-buffer-pool-size=64M",
            "--innodb-flush-log-at-trx-commit=2",
            "--character-set-server=utf8mb4",
        ],
        workdir,
        ready,
        env=env,
    )


def _template() -> pathlib.Path:
    workdir = pathlib.Path(tempfile.mkdtemp(prefix="tenure-mariadb-template-"))
    result = subprocess.run(
        [
            require_binary("mariadb-install-db", "/usr/bin/mariadb-install-db"),
            "--no-defaults",
            "--user=root",
            f"--datadir={workdir / 'data'}",
            f"--tmpdir={private_tmpdir(workdir)}",
            "--auth-root-authentication-method=socket",
            "--skip-test-db",
        ],
        check=False, capture_output=True, text=True, timeout=180,
    )
    if result.returncode != 0:
        raise ServerFailed(f"mariadb-install-db failed: {result.stderr[-2000:]}")
    process = _server_process(workdir, free_port(), ready_as_root=True).start()
    try:
        import pymysql

        connection = pymysql.connect(unix_socket=str(workdir / "mysqld.sock"), user="root",
                                     autocommit=True)
        try:
            with connection.cursor() as cursor:
                cursor.execute(f"CREATE DATABASE {DATABASE} CHARACTER SET utf8mb4")
                cursor.execute(f"CREATE USER '{USER}'@'127.0.0.1' IDENTIFIED BY %s", (PASSWORD,))
                cursor.execute(f"GRANT ALL ON {DATABASE}.* TO '{USER}'@'127.0.0.1'")
        finally:
            connection.close()
    finally:
        process.stop(timeout=30)
    return workdir


@contextlib.contextmanager
def _server(template: pathlib.Path, env: dict[str, str] | None = None
            ) -> Iterator[MariaDBServer]:
    workdir = pathlib.Path(tempfile.mkdtemp(prefix="tenure-mariadb-"))
    shutil.copytree(template / "data", workdir / "data")
    port = free_port()
    process = _server_process(workdir, port, env=env)
    try:
        process.start()
        yield MariaDBServer(process, port, workdir)
    finally:
        process.stop(timeout=30)
        shutil.rmtree(workdir, ignore_errors=True)


mysql_template, mysql_server, mysql_url, restartable_mysql = (
    templated_fixtures("mysql", _template, _server)
)
