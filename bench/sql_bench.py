#!/usr/bin/env python3
"""tenure's PostgreSQL and MySQL/MariaDB backends against the raw floor and the database's own
advisory lock, side by side.

    .venv/bin/python bench/sql_bench.py [--seconds S] [--handoffs N] [--no-write]
        [--postgresql-url URL] [--mysql-url URL] [--only postgresql|mysql]

Without URLs it starts a throw-away PostgreSQL and MariaDB with the test harness
(``tests/servers``: temp dirs, free loopback ports, ``fsync=off`` /
``innodb_flush_log_at_trx_commit=2``). For each database:

1. Uncontended cycles: one process, acquire + release of one name in a loop, in 3
   interleaved rounds of ``--seconds``/3, best round kept; cycles per second, for
   - tenure (threads), and tenure under asyncio;
   - the raw floor: tenure's own acquire and release statements, bare, in a loop on one
     driver connection (same driver, same settings): what tenure costs above its SQL;
   - the advisory lock: ``pg_try_advisory_lock`` / ``pg_advisory_unlock`` on PostgreSQL,
     ``GET_LOCK(name, 0)`` / ``RELEASE_LOCK`` on MySQL, on one connection.
2. Contended handoff: two processes take turns on one lock. The holder waits until the other
   is blocked in acquire, holds 5..55 ms more (uniform, so the release lands anywhere in a
   poller's cycle), stamps ``time.monotonic_ns()`` (one clock for the host) just before
   release; the waiter stamps when its acquire returns. tenure with its defaults (PostgreSQL:
   LISTEN/NOTIFY; MySQL: the holder's release gate) against the advisory lock's blocking wait
   (``pg_advisory_lock`` / ``GET_LOCK(name, 3600)``), which the server wakes directly.

Prints a table and writes docs/benchmarks-sql.md with ratios. No assertions: figures only.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import functools
import hashlib
import importlib.metadata
import multiprocessing
import os
import pathlib
import secrets
import shutil
import sys
import urllib.parse
from collections.abc import Callable, Iterator
from multiprocessing.context import SpawnContext
from typing import Any

import _common

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the test harness starts the servers

import tenure  # noqa: E402
from tenure.backends.mysql._sql import Statements as MySQLStatements  # noqa: E402
from tenure.backends.postgresql._sql import Statements as PostgreSQLStatements  # noqa: E402

REPORT = ROOT / "docs" / "benchmarks-sql.md"
ROUNDS = 3
LOCK_NAME = "bench:lock"


@dataclasses.dataclass(frozen=True)
class Subject:
    label: str
    kind: str  # "tenure", "tenure-async", "raw", "advisory"
    url: str
    blocking: bool = False  # advisory only: wait on the server instead of trying once


def _is_postgresql(url: str) -> bool:
    return url.startswith(("postgresql://", "postgres://"))


def _mysql_connect(url: str) -> Any:
    import pymysql
    from pymysql.constants import CLIENT

    parts = urllib.parse.urlsplit(url)
    return pymysql.connect(
        host=parts.hostname, port=parts.port or 3306,
        user=urllib.parse.unquote(parts.username or ""),
        password=urllib.parse.unquote(parts.password or ""),
        database=parts.path.lstrip("/"), autocommit=True, charset="utf8mb4",
        client_flag=CLIENT.FOUND_ROWS,
    )


def _advisory_key(name: str) -> int:
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big", signed=True)


def tenure_connection(url: str) -> tuple[Any, Callable[[], None]]:
    """A driver connection made by tenure itself, so the raw and advisory rows run with the
    very settings tenure uses (autocommit, READ COMMITTED, timeouts, UTC; MySQL: sql_mode,
    CLIENT_FOUND_ROWS), and none of the machinery around them."""
    owner = tenure.connect(url)
    backend: Any = owner.backend
    connection = backend._pool.connect() if _is_postgresql(url) else backend.store.pool._connect()

    def close() -> None:
        connection.close()
        owner.close()

    return connection, close


def make_lock(subject: Subject) -> tuple[_common.Pair, Callable[[], None]]:
    """(acquire, release) callables for ``subject``, and a clean-up."""
    url = subject.url
    if subject.kind == "tenure":
        locks = tenure.connect(url)
        lock = locks.lock(LOCK_NAME, ttl=30.0)
        return (lock.acquire, lock.release), locks.close
    connection, close = tenure_connection(url)
    if _is_postgresql(url):
        if subject.kind == "raw":
            sql = PostgreSQLStatements("tenure_locks")
            state: dict[str, Any] = {}

            def acquire() -> Any:
                state["token"] = secrets.token_hex(16)
                row = connection.execute(sql.acquire, {
                    "name": LOCK_NAME, "token": state["token"], "ttl": 30.0, "host": "bench",
                    "pid": os.getpid(), "thread": "bench", "value": None,
                }).fetchone()
                assert row is not None and row[0] is not None
                return row

            def release() -> Any:
                return connection.execute(sql.release, {
                    "name": LOCK_NAME, "token": state["token"], "channel": sql.table,
                }).fetchall()

            return (acquire, release), close
        key = _advisory_key(LOCK_NAME)
        take = "SELECT pg_advisory_lock(%s)" if subject.blocking else \
            "SELECT pg_try_advisory_lock(%s)"
        return (
            (lambda: connection.execute(take, (key,)).fetchone(),
             lambda: connection.execute("SELECT pg_advisory_unlock(%s)", (key,)).fetchone()),
            close,
        )
    cursor = connection.cursor()
    if subject.kind == "raw":
        sql = MySQLStatements("tenure_locks")
        hex_name = LOCK_NAME.encode().hex()
        state = {}

        def acquire() -> Any:
            state["token"] = secrets.token_hex(16)
            cursor.execute(sql.acquire, {
                "name": hex_name, "token": state["token"], "ttl_us": 30_000_000,
                "host": "bench", "pid": os.getpid(), "thread": "bench",
            })
            assert cursor.lastrowid
            return cursor.lastrowid

        def release() -> Any:
            return cursor.execute(sql.release, {"name": hex_name, "token": state["token"]})

        return (acquire, release), close
    wait = 3600 if subject.blocking else 0
    return (
        (lambda: cursor.execute("SELECT GET_LOCK(%s, %s)", (LOCK_NAME, wait)),
         lambda: cursor.execute("SELECT RELEASE_LOCK(%s)", (LOCK_NAME,))),
        close,
    )


# ---- uncontended ----------------------------------------------------------------------------


def uncontended(subject: Subject, seconds: float) -> tuple[float, int]:
    """(cycles per second, cycles) of acquire + release in one process, for ``seconds``."""
    if subject.kind == "tenure-async":
        return asyncio.run(uncontended_async(subject, seconds))
    # (The 50 warm-up cycles: connections, table, prepared statements.)
    return _common.uncontended(
        functools.partial(make_lock, subject), seconds, warmup=50, batch=50)


async def uncontended_async(subject: Subject, seconds: float) -> tuple[float, int]:
    async with tenure.connect_async(subject.url) as locks:
        lock = locks.lock(LOCK_NAME, ttl=30.0)
        return await _common.async_timed_loop(lock, seconds, warmup=50, batch=50)


# ---- servers, report ------------------------------------------------------------------------


@contextlib.contextmanager
def servers(args: argparse.Namespace) -> Iterator[dict[str, str]]:
    """The URLs to measure: given ones, or throw-away servers of the test harness."""
    with contextlib.ExitStack() as stack:
        urls: dict[str, str] = {}
        if "postgresql" in args.only:
            if args.postgresql_url:
                urls["postgresql"] = args.postgresql_url
            else:
                from tests.servers import postgresql

                template = postgresql._template()
                stack.callback(shutil.rmtree, template, True)
                urls["postgresql"] = stack.enter_context(postgresql._server(template)).url
        if "mysql" in args.only:
            if args.mysql_url:
                urls["mysql"] = args.mysql_url
            else:
                from tests.servers import mysql

                template = mysql._template()
                stack.callback(shutil.rmtree, template, True)
                urls["mysql"] = stack.enter_context(mysql._server(template)).url
        yield urls


def server_version(url: str) -> str:
    if _is_postgresql(url):
        import psycopg

        with psycopg.connect(url) as connection:
            row = connection.execute("SHOW server_version").fetchone()
            return f"PostgreSQL {row[0] if row else '?'}"
    connection = _mysql_connect(url)
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT VERSION()")
            return f"MySQL/MariaDB {cursor.fetchone()[0]}"
    finally:
        connection.close()


def machine() -> dict[str, str]:
    return {
        **_common.machine(load_average=True),
        "tenure": tenure.__version__,
        "psycopg": importlib.metadata.version("psycopg"),
        "PyMySQL": importlib.metadata.version("PyMySQL"),
    }


@dataclasses.dataclass
class Results:
    database: str
    version: str
    rates: dict[str, tuple[float, int]]
    handoffs: dict[str, list[int]]
    labels: dict[str, str]  # role -> label


def measure(database: str, url: str, args: argparse.Namespace,
            context: SpawnContext) -> Results:
    advisory_name = "pg_try_advisory_lock" if database == "postgresql" else "GET_LOCK(name, 0)"
    waiting_name = "pg_advisory_lock" if database == "postgresql" else "GET_LOCK(name, 3600)"
    subjects = {
        "tenure": Subject("tenure (threads)", "tenure", url),
        "async": Subject("tenure (asyncio)", "tenure-async", url),
        "raw": Subject("raw floor: tenure's statements, bare", "raw", url),
        "advisory": Subject(f"advisory: {advisory_name}", "advisory", url),
    }
    version = server_version(url)
    print(f"== {database}: {version}", flush=True)
    rates = _common.best_of_rounds({
        subject.label: functools.partial(uncontended, subject, args.seconds / ROUNDS)
        for subject in subjects.values()
    }, ROUNDS)
    for label, (rate, cycles) in rates.items():
        print(f"uncontended {label:<40} {rate:>9,.0f} cycles/s ({1e6 / rate:,.1f} µs, "
              f"{cycles:,} cycles)", flush=True)
    blocking = Subject(f"advisory: {waiting_name}", "advisory", url, blocking=True)
    handoffs = _common.handoffs(context, {
        subject.label: functools.partial(make_lock, subject)
        for subject in (subjects["tenure"], blocking)
    }, args.handoffs, width=40)
    labels = {role: subject.label for role, subject in subjects.items()}
    labels["blocking"] = blocking.label
    return Results(database, version, rates, handoffs, labels)


def render(facts: dict[str, str], results: list[Results], args: argparse.Namespace) -> str:
    lines = [
        "# Benchmark: tenure's SQL backends vs the raw floor and advisory locks",
        "",
        "Generated by `.venv/bin/python bench/sql_bench.py`; rerun it to refresh. Client and "
        "servers on one shared host over loopback TCP; treat differences under ~20% as "
        "noise. Test-harness servers: PostgreSQL with `fsync=off`, MariaDB with "
        "`innodb_flush_log_at_trx_commit=2` (both lose nothing to a process crash; a "
        "production server syncing every commit adds its fsync to every write on both the "
        "tenure and the raw rows, not to the advisory rows, which write nothing).",
        "",
        *_common.facts_table(
            {**facts, **{f"{r.database} server": r.version for r in results}}),
        "",
    ]
    for r in results:
        def rate(role: str, r: Results = r) -> float:
            return r.rates[r.labels[role]][0]

        def ms(role: str, fraction: float, r: Results = r) -> float:
            return _common.ms(r.handoffs[r.labels[role]], fraction)

        wakeup = (
            "LISTEN/NOTIFY: the release's `pg_notify` wakes the waiter's listening connection"
            if r.database == "postgresql" else
            "its release gate: the holder's session holds a `GET_LOCK`, taken inside the "
            "grant's statement and given back inside the release's, and the waiter blocks on it "
            "in `GET_LOCK` (taking it and giving it back in one statement), woken when the "
            "release opens it"
        )
        lines += [
            f"## {r.database}",
            "",
            f"### Uncontended acquire + release (one process, {args.seconds:g} s each, best of "
            f"{ROUNDS} interleaved rounds)",
            "",
            *_common.rates_table(r.rates, "µs"),
            "",
            f"Ratios: tenure / raw floor **{rate('tenure') / rate('raw'):.2f}x**, tenure / "
            f"advisory **{rate('tenure') / rate('advisory'):.2f}x** the throughput; asyncio / "
            f"threads **{rate('async') / rate('tenure'):.2f}x**. The raw floor runs tenure's "
            "own two statements with nothing around them; the difference is the lock logic, "
            "the connection pool, the statement deadline and error translation. The advisory "
            "lock writes nothing: no fence, no holder, no lease that outlives the session. "
            + (
                "Under asyncio each statement runs on psycopg's AsyncConnection inside a task "
                "of its own, shielded from cancellation."
                if r.database == "postgresql" else
                "Under asyncio PyMySQL runs in the event loop's default thread pool: a thread "
                "hop per statement. The raw floor's statements take no release gate; tenure's "
                "take it (`GET_LOCK`) and give it back (`RELEASE_LOCK`) inside those same two "
                "statements."
            ),
            "",
            f"### Contended handoff ({args.handoffs} handoffs between 2 processes)",
            "",
            f"tenure waits by {wakeup}. The advisory lock's waiter blocks in the server, which "
            "hands the lock over itself: the floor for any lock on this server.",
            "",
            *_common.handoff_table(r.handoffs),
            "",
            f"Ratios tenure / advisory (lower is better): p50 "
            f"**{ms('tenure', 0.5) / ms('blocking', 0.5):.2f}**, p99 "
            f"**{ms('tenure', 0.99) / ms('blocking', 0.99):.2f}**. With a few hundred "
            "handoffs, p99 is the 2nd-3rd worst sample: read it as an order of magnitude.",
            "",
        ]
    by_database = {r.database: r for r in results}
    if {"postgresql", "mysql"} <= set(by_database):
        def p50(database: str) -> float:
            r = by_database[database]
            return _common.ms(r.handoffs[r.labels["tenure"]], 0.5)

        lines += [
            "## MySQL against PostgreSQL",
            "",
            f"tenure's contended handoff p50, MySQL / PostgreSQL in this run: "
            f"**{p50('mysql') / p50('postgresql'):.2f}x** (target: <= 2x).",
            "",
        ]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=3.0,
                        help="seconds per uncontended measurement (default: 3)")
    parser.add_argument("--handoffs", type=int, default=200,
                        help="handoffs per handoff measurement (default: 200)")
    parser.add_argument("--postgresql-url", help="measure this server instead of starting one")
    parser.add_argument("--mysql-url", help="measure this server instead of starting one")
    parser.add_argument("--only", choices=["postgresql", "mysql"], action="append",
                        help="measure one database (repeatable; default: both)")
    parser.add_argument("--no-write", action="store_true",
                        help=f"print only; do not write {REPORT.relative_to(ROOT)}")
    args = parser.parse_args()
    args.only = args.only or ["postgresql", "mysql"]
    context = multiprocessing.get_context("spawn")
    facts = machine()
    _common.print_facts(facts)
    with servers(args) as urls:
        results = [measure(database, url, args, context) for database, url in urls.items()]
    report = render(facts, results, args)
    _common.publish(report, REPORT, ROOT, write=not args.no_write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
