"""Operating the SQL backends: the ``tenure`` command against them, and a DBA-created table
used by an application user that may not create tables."""

from __future__ import annotations

import subprocess
import sys
import uuid
from typing import Any

import pytest

import tenure
from tests.integration.processes import ROOT
from tests.integration.sql_support import SQL_BACKENDS, raw, url_fixture


@pytest.fixture(params=SQL_BACKENDS)
def sql_url(request: pytest.FixtureRequest) -> str:
    return url_fixture(request)


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tenure", *args], cwd=ROOT, capture_output=True, text=True,
        timeout=60, check=False,
    )


def test_ls_show_break_from_the_command_line(sql_url: str) -> None:
    prefix = f"cli:{uuid.uuid4().hex}:"
    with tenure.connect(sql_url) as locks:
        lock = locks.lock(prefix + "job 'quoted' 100%", ttl=60)
        assert lock.acquire()
        listed = cli("ls", prefix, "--url", sql_url)
        assert listed.returncode == 0, listed.stderr
        assert "job 'quoted' 100%" in listed.stdout
        shown = cli("show", prefix + "job 'quoted' 100%", "--url", sql_url)
        assert shown.returncode == 0 and "held" in shown.stdout, shown.stdout + shown.stderr
        broken = cli("break", prefix + "job 'quoted' 100%", "--url", sql_url)
        assert broken.returncode == 0, broken.stderr
        assert lock.owned() is False
        for result in (listed, shown, broken):
            assert "s3cret" not in result.stdout + result.stderr


@pytest.mark.postgresql
def test_postgresql_user_without_create_privilege_uses_a_dba_made_table(
    postgresql_url: str,
) -> None:
    table = f"dba_{uuid.uuid4().hex[:12]}"
    role = f"app_{uuid.uuid4().hex[:12]}"
    with tenure.connect(postgresql_url, table=table) as admin:  # the DBA's one-time set-up
        admin.lock("setup", ttl=1).acquire(blocking=False)
    raw(postgresql_url, f'CREATE ROLE "{role}" LOGIN')
    raw(postgresql_url, f'REVOKE CREATE ON SCHEMA public FROM PUBLIC, "{role}"')
    raw(postgresql_url, f'GRANT SELECT, INSERT, UPDATE ON "{table}" TO "{role}"')
    app_url = postgresql_url.replace("postgres@", f"{role}@", 1)
    _exercise(app_url, table)
    with pytest.raises(tenure.BackendError, match="permission denied"):
        _exercise(app_url, f"other_{uuid.uuid4().hex[:12]}")  # may not create its own


@pytest.mark.postgresql
@pytest.mark.parametrize("how", ["query", "environment"])
def test_postgresql_empty_host_is_libpq_local_socket(
    postgresql_server: Any, postgresql_url: str, how: str, name: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # libpq's postgresql:///db: no host means the local socket directory, taken from the
    # query's host= or from $PGHOST. The harness's server listens in its work directory.
    socket_dir, port = str(postgresql_server.workdir), str(postgresql_server.port)
    if how == "query":
        url = f"postgresql:///tenure_test?host={socket_dir}&port={port}&user=postgres"
    else:
        monkeypatch.setenv("PGHOST", socket_dir)
        monkeypatch.setenv("PGPORT", port)
        monkeypatch.setenv("PGUSER", "postgres")
        url = "postgresql:///tenure_test"
    with tenure.connect(url) as local, tenure.connect(postgresql_url) as tcp:
        lock = local.lock(name, ttl=10)
        assert lock.acquire(timeout=5)
        assert tcp.lock(name).locked()  # the same server, reached through its socket
        lock.release()
    import psycopg

    with psycopg.connect(url, connect_timeout=5) as connection:  # the premise: a socket
        assert connection.execute("SELECT inet_server_addr() IS NULL").fetchone() == (True,)


@pytest.mark.mysql
def test_mysql_user_without_create_privilege_uses_a_dba_made_table(mysql_server: Any) -> None:
    import pymysql

    table = f"dba_{uuid.uuid4().hex[:12]}"
    user = f"app_{uuid.uuid4().hex[:12]}"
    with tenure.connect(mysql_server.url, table=table) as admin:
        admin.lock("setup", ttl=1).acquire(blocking=False)
    root = pymysql.connect(unix_socket=str(mysql_server.socket), user="root", autocommit=True)
    try:
        with root.cursor() as cursor:
            cursor.execute(f"CREATE USER '{user}'@'127.0.0.1' IDENTIFIED BY 'pw'")
            cursor.execute(f"GRANT SELECT, INSERT, UPDATE ON tenure_test.{table} "
                           f"TO '{user}'@'127.0.0.1'")
    finally:
        root.close()
    app_url = f"mysql://{user}:pw@127.0.0.1:{mysql_server.port}/tenure_test"
    _exercise(app_url, table)
    with pytest.raises(tenure.BackendError, match="denied"):
        _exercise(app_url, f"other_{uuid.uuid4().hex[:12]}")


def _exercise(url: str, table: str) -> None:
    with tenure.connect(url, table=table) as locks:
        lock = locks.lock("app", ttl=10, renew=True)
        assert lock.acquire(timeout=5)
        lock.extend()
        assert lock.owned()
        assert [info.name for info in locks.list_locks("app")] == ["app"]
        lock.release()
        assert locks.break_lock("app") is False
