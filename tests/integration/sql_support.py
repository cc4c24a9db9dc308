"""What the SQL backends' integration tests share: the backend parameters and raw access to
the servers behind tenure's back (to check what it stored, or to damage it)."""

from __future__ import annotations

import threading
import urllib.parse
from collections.abc import Callable
from typing import Any

import pytest

from tests.backends import row

SQL_BACKENDS = [row("mysql").param(), row("postgresql").param()]
"""Parametrize a fixture with these; ``-k mysql`` / ``-k postgresql`` select one."""


def url_fixture(request: pytest.FixtureRequest) -> str:
    """The session server's URL for the backend named by ``request.param``."""
    url: str = request.getfixturevalue(row(request.param).fixture)
    return url


def raw(url: str, sql: str, params: Any = None) -> list[tuple[Any, ...]]:
    """Run one statement with the plain driver, in autocommit; return its rows."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme.startswith("postgres"):
        import psycopg

        conninfo = urllib.parse.urlunsplit(parts._replace(query=""))
        with psycopg.connect(conninfo, autocommit=True, connect_timeout=5) as connection:
            cursor = connection.execute(sql, params)
            return cursor.fetchall() if cursor.description is not None else []
    connection = mysql_connection(url, autocommit=True, read_timeout=10)
    try:
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            return list(cursor.fetchall())
    finally:
        connection.close()


def mysql_connection(url: str, *, autocommit: bool, read_timeout: float | None = None) -> Any:
    """A plain PyMySQL connection to the server and database of a ``mysql://`` URL (its
    options left out): for statements the test runs beside tenure's own."""
    import pymysql

    parts = urllib.parse.urlsplit(url)
    return pymysql.connect(
        host=parts.hostname, port=parts.port, user=urllib.parse.unquote(parts.username or ""),
        password=urllib.parse.unquote(parts.password or ""), database=parts.path.lstrip("/"),
        autocommit=autocommit, connect_timeout=5, read_timeout=read_timeout,
    )


def quote_table(url: str, table: str) -> str:
    return f'"{table}"' if url.startswith("postgres") else f"`{table}`"


def all_at_once(clients: int, work: Callable[[int], None]) -> list[BaseException]:
    """Run ``work(0)`` .. ``work(clients - 1)`` in threads that start it together (as many
    processes meeting an old table at once would); return what they raised."""
    errors: list[BaseException] = []
    start = threading.Barrier(clients)

    def run(number: int) -> None:
        try:
            start.wait()
            work(number)
        except BaseException as exc:  # reported by the caller's assertion
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(n,)) for n in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    return errors
