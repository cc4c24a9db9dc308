#!/usr/bin/env python3
"""What a released name costs each backend, and for how long: per-entity names
(``order:123456``) each locked once and released, then the clean-up period.

    .venv/bin/python bench/footprint_bench.py [--only redis,sqlite,...] [--names N]
        [--small-names N] [--gc-after S] [--no-write]

Every server is a throw-away one started by the test harness (``tests/servers``) on a free
loopback port. Per backend:

1. Measure the store (below), then acquire and release ``--names`` distinct names through
   ``tenure.connect(url)`` with the default ``gc_after`` (10 minutes: longer than the run,
   so no record has gone yet; ``--sql-names`` on the SQL stores, ``--small-names`` on the
   slower ones: the cost per name does not depend on how many there are), and measure
   again two seconds later (once the wake lists a Redis release pushes to, which live a
   second, are gone). The difference divided by the names is what a released name costs while its
   record lives.
2. How long it lives: 200 more names through ``tenure.connect(url, gc_after=S)``, then the
   store is watched until their records are gone (at most S + ``--wait``, 180 s), taking
   and releasing one name every half second meanwhile (the SQL stores sweep after a grant
   or a release; Redis and MongoDB expire records by themselves) and asking ``inspect``
   about every 10th of them. Reported: seconds from the last release until none of those
   is known any more. With the default, add 600 - S seconds.
3. Every 10th of those names is taken again: each new fence must be above the one of step 2
   (the record was removed meanwhile, so only the clock floor keeps it so).

What "bytes" means per store: Redis, ``used_memory`` (INFO memory; a released name's record
alone, ``MEMORY USAGE``, is printed too); SQLite, the pages in use (page_count -
freelist_count, times page_size); PostgreSQL, the tuples' bytes (``pg_column_size`` of each
row) plus 40 bytes of tuple header, line pointer and index entry per row, as a table's size
on disk only shrinks at VACUUM FULL; MySQL, InnoDB's data and index length after ANALYZE
TABLE (pages: coarse); MongoDB (the mongoeco stand-in), the BSON size of each document;
etcd, the keys tenure wrote and ``dbSizeInUse``; ZooKeeper, the nodes under tenure's
namespace and their paths' and data's bytes; Redlock, the sum over its nodes of Redis's
``used_memory``, divided by the number of nodes (each node keeps a copy). Every backend
honours ``gc_after``: etcd's and ZooKeeper's record (the last fence, for ``inspect``) is
not what keeps their fences rising (the store's global revision or zxid), Redlock's
counters start again from each node's clock.

Prints a table and writes docs/benchmarks-footprint.md. No assertions: figures only.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import pathlib
import shutil
import sqlite3
import sys
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import _common

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the test harness starts the servers

import tenure  # noqa: E402

SAMPLE_EVERY = 100
LIFETIME_NAMES = 200
WAKE_LISTS_GONE = 2.0
"""Seconds before measuring: a Redis release pushes to the name's wake list, which lives a
second; what stays is the record."""
SLOW = ("mongodb", "etcd", "zookeeper", "redlock")
ALL = ("redis", "sqlite", "postgresql", "mysql", "mongodb", "etcd", "zookeeper", "redlock")

Probe = Callable[[], tuple[int, int]]
"""The store's (records, bytes) now."""


# ---- the stores: a running server, and how to measure it -----------------------------------


@contextlib.contextmanager
def redis_store(workdir: pathlib.Path) -> Iterator[tuple[str, Probe, dict[str, str]]]:
    import redis
    from tests.servers.redis import start_redis

    server = start_redis(workdir, unix_socket=False)
    client = redis.Redis.from_url(server.url)

    def probe() -> tuple[int, int]:
        return int(client.dbsize()), int(client.info("memory")["used_memory"])

    extra: dict[str, str] = {}
    try:
        yield server.url, probe, extra
        # One released name's record alone, as Redis counts it.
        with tenure.connect(server.url, gc_after=600) as locks:
            lock = locks.lock(f"order:{uuid.uuid4().hex[:8]}", ttl=10)
            assert lock.acquire(blocking=False)
            lock.release()
        keys = [key for key in client.scan_iter("tenure:*") if not key.endswith(b":wake")]
        if keys:
            extra["redis"] = f"MEMORY USAGE of one released name's record: " \
                f"{client.memory_usage(keys[0])} bytes"
    finally:
        client.close()
        server.stop()


@contextlib.contextmanager
def sqlite_store(workdir: pathlib.Path) -> Iterator[tuple[str, Probe, dict[str, str]]]:
    path = workdir / "locks.db"

    def probe() -> tuple[int, int]:
        if not path.exists():
            return 0, 0
        with contextlib.closing(sqlite3.connect(path)) as db:
            rows = db.execute("SELECT count(*) FROM tenure_locks").fetchone()[0]
            pages = db.execute("PRAGMA page_count").fetchone()[0]
            free = db.execute("PRAGMA freelist_count").fetchone()[0]
            size = db.execute("PRAGMA page_size").fetchone()[0]
        return int(rows), int((pages - free) * size)

    with tenure.connect(f"sqlite:///{path}") as locks:  # the tables exist before step 1
        locks.lock("warm-up").acquire()
    yield f"sqlite:///{path}", probe, {}


@contextlib.contextmanager
def postgresql_store(workdir: pathlib.Path) -> Iterator[tuple[str, Probe, dict[str, str]]]:
    import psycopg
    from tests.servers import postgresql

    template = postgresql._template()
    try:
        with postgresql._server(template) as server:
            url = server.url
            with tenure.connect(url) as locks:
                locks.lock("warm-up").acquire()
            dsn = url.split("?")[0]

            def probe() -> tuple[int, int]:
                with psycopg.connect(dsn, autocommit=True) as db:
                    rows, data = db.execute(
                        "SELECT count(*), coalesce(sum(pg_column_size(t.*)), 0) "
                        "FROM tenure_locks t").fetchone()  # type: ignore[misc]
                return int(rows), int(data) + 40 * int(rows)

            yield url, probe, {}
    finally:
        shutil.rmtree(template, ignore_errors=True)


@contextlib.contextmanager
def mysql_store(workdir: pathlib.Path) -> Iterator[tuple[str, Probe, dict[str, str]]]:
    from tests.integration.sql_support import mysql_connection
    from tests.servers import mysql

    template = mysql._template()
    try:
        with mysql._server(template) as server:
            url = server.url
            with tenure.connect(url) as locks:
                locks.lock("warm-up").acquire()

            def probe() -> tuple[int, int]:
                with contextlib.closing(mysql_connection(url, autocommit=True)) as db, \
                        db.cursor() as cursor:
                    cursor.execute("SELECT count(*) FROM tenure_locks")
                    rows = cursor.fetchone()[0]
                    cursor.execute("ANALYZE TABLE tenure_locks")
                    cursor.fetchall()
                    cursor.execute(
                        "SELECT data_length + index_length FROM information_schema.tables "
                        "WHERE table_schema = DATABASE() AND table_name = 'tenure_locks'")
                    size = cursor.fetchone()[0]
                return int(rows), int(size)

            yield url, probe, {}
    finally:
        shutil.rmtree(template, ignore_errors=True)


@contextlib.contextmanager
def mongodb_store(workdir: pathlib.Path) -> Iterator[tuple[str, Probe, dict[str, str]]]:
    import bson
    import pymongo
    from tests.servers.mongodb import MongoecoServer

    server = MongoecoServer(workdir)
    server.start()
    client: pymongo.MongoClient[dict[str, object]] = pymongo.MongoClient(server.url)
    try:
        collection = client.get_default_database("tenure")["locks"]

        def probe() -> tuple[int, int]:
            documents = list(collection.find({}))
            return len(documents), sum(len(bson.encode(doc)) for doc in documents)

        yield server.url, probe, {"mongodb": "the mongoeco stand-in: its TTL monitor removes "
                                  "documents as MongoDB's does, every 60 s"}
    finally:
        client.close()
        server.stop()


def _etcd_post(port: int, path: str, body: dict[str, object]) -> dict[str, object]:
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}",
                                     data=json.dumps(body).encode(), method="POST")
    with urllib.request.urlopen(request, timeout=10) as answer:
        reply: dict[str, object] = json.loads(answer.read())
    return reply


@contextlib.contextmanager
def etcd_store(workdir: pathlib.Path) -> Iterator[tuple[str, Probe, dict[str, str]]]:
    import base64

    from tests.servers.etcd import start_etcd_cluster

    cluster = start_etcd_cluster(workdir, size=1)
    port = cluster.members[0].client_port

    def probe() -> tuple[int, int]:
        prefix = base64.b64encode(b"tenure/").decode()
        end = base64.b64encode(b"tenure0").decode()
        counted = _etcd_post(port, "/v3/kv/range",
                             {"key": prefix, "range_end": end, "count_only": True})
        status = _etcd_post(port, "/v3/maintenance/status", {})
        return int(str(counted.get("count", 0))), int(str(status.get("dbSizeInUse", 0)))

    try:
        yield cluster.url, probe, {}
    finally:
        cluster.stop()


@contextlib.contextmanager
def zookeeper_store(workdir: pathlib.Path) -> Iterator[tuple[str, Probe, dict[str, str]]]:
    from kazoo.client import KazooClient
    from tests.servers.zookeeper import SERVING_JVM, start_zookeeper_ensemble

    ensemble = start_zookeeper_ensemble(workdir, jvm=SERVING_JVM)
    client = KazooClient(hosts=f"127.0.0.1:{ensemble.members[0].client_port}")
    client.start(timeout=30)

    def probe() -> tuple[int, int]:
        # Nodes under tenure's namespace, and their paths' and data's bytes (what ZooKeeper's
        # own zk_approximate_data_size counts; mntr is not enabled on the test servers).
        nodes = size = 0
        pending = ["/tenure"]
        while pending:
            path = pending.pop()
            if not client.exists(path):
                continue
            data, _ = client.get(path)
            nodes += 1
            size += len(path) + len(data)
            pending.extend(f"{path}/{child}" for child in client.get_children(path))
        return nodes, size

    try:
        yield ensemble.url, probe, {"zookeeper": "bytes: each node's path and data (what "
                                    "ZooKeeper's zk_approximate_data_size counts), without "
                                    "the server's per-node overhead"}
    finally:
        client.stop()
        client.close()
        ensemble.stop()


@contextlib.contextmanager
def redlock_store(workdir: pathlib.Path) -> Iterator[tuple[str, Probe, dict[str, str]]]:
    import redis
    from tests.servers.redlock import start_redlock_nodes

    nodes = start_redlock_nodes(workdir, 3)
    clients = [redis.Redis(port=server.port) for server in nodes.servers]

    def probe() -> tuple[int, int]:
        # Per node: each keeps its own copy of a name's record.
        records = sum(int(client.dbsize()) for client in clients)
        used = sum(int(client.info("memory")["used_memory"]) for client in clients)
        return records // len(clients), used // len(clients)

    try:
        yield nodes.url, probe, {"redlock": "per node (3 nodes, each keeps a copy): Redis's "
                                 "used_memory summed over the nodes, divided by 3"}
    finally:
        for client in clients:
            client.close()
        nodes.stop()


STORES = {
    "redis": redis_store, "sqlite": sqlite_store, "postgresql": postgresql_store,
    "mysql": mysql_store, "mongodb": mongodb_store, "etcd": etcd_store,
    "zookeeper": zookeeper_store, "redlock": redlock_store,
}
COLLECTED = ("redis", "sqlite", "postgresql", "mysql", "mongodb", "etcd", "zookeeper",
             "redlock")
"""The stores with gc_after: every one."""


# ---- the measurement -------------------------------------------------------------------------


def cycle(locks: tenure.Locks, names: list[str], sample_every: int) -> tuple[float, dict[str, int]]:
    """Acquire and release each name once: seconds taken, and the sampled names' fences."""
    sampled: dict[str, int] = {}
    began = time.perf_counter()
    for index, name in enumerate(names):
        lock = locks.lock(name, ttl=10.0)
        if not lock.acquire(blocking=False):
            raise RuntimeError(f"{name} was not free")
        if index % sample_every == 0:
            assert lock.fence is not None
            sampled[name] = lock.fence
        lock.release()
    return time.perf_counter() - began, sampled


def measure(
    store: str, url: str, probe: Probe, names: int, gc_after: float, wait: float
) -> dict[str, str]:
    run = uuid.uuid4().hex[:6]
    collected = store in COLLECTED
    # 1. The cost while a released name's record lives: the default gc_after (longer than the
    # run), so that none has gone yet.
    with tenure.connect(url) as locks:
        records_before, bytes_before = probe()
        elapsed, _ = cycle(locks, [f"order:{run}:{index}" for index in range(names)],
                           SAMPLE_EVERY)
        time.sleep(WAKE_LISTS_GONE)
        records_after, bytes_after = probe()
    per_name = (bytes_after - bytes_before) / names
    # 2. How long it lives: LIFETIME_NAMES more names with a short gc_after, watched until
    # their records are gone; 3. then taken again.
    lived: float | None = None
    regressions = 0
    sampled: dict[str, int] = {}
    options: dict[str, Any] = {"gc_after": gc_after} if collected else {}
    with tenure.connect(url, **options) as locks:
        _, sampled = cycle(locks, [f"short:{run}:{index}" for index in range(LIFETIME_NAMES)],
                           10)
        released_at = time.monotonic()
        if collected:
            limit = released_at + gc_after + wait
            while time.monotonic() < limit:
                with contextlib.suppress(tenure.LockTimeout), locks.lock(
                        f"tick:{run}", ttl=1.0, timeout=0):
                    pass  # a grant and a release: the SQL stores sweep after one
                if all(locks.inspect(name) is None for name in sampled):
                    lived = time.monotonic() - released_at
                    break
                time.sleep(0.5)
        for name, fence in sampled.items():
            again = locks.lock(name, ttl=10.0)
            assert again.acquire(blocking=False)
            assert again.fence is not None
            regressions += again.fence <= fence
            again.release()
    return {
        "names": f"{names:,}",
        "cycles/s": f"{names / elapsed:,.0f}",
        "records per released name": f"{(records_after - records_before) / names:.2f}",
        "bytes per released name": f"{per_name:,.0f}",
        "kept after release (gc_after)": (
            "for ever (no gc_after)" if not collected
            else f"{lived:.1f} s ({gc_after:g} s)" if lived is not None
            else f"over {gc_after + wait:g} s ({gc_after:g} s)"),
        "fences that went back after removal": f"{regressions} of {len(sampled)}",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--only", default=",".join(ALL))
    parser.add_argument("--names", type=int, default=50_000)
    parser.add_argument("--sql-names", type=int, default=10_000,
                        help="names on sqlite, postgresql, mysql")
    parser.add_argument("--small-names", type=int, default=2_000,
                        help=f"names on the slower stores ({', '.join(SLOW)})")
    parser.add_argument("--gc-after", type=float, default=10.0)
    parser.add_argument("--wait", type=float, default=180.0,
                        help="seconds past gc_after to wait for the records to go")
    parser.add_argument("--no-write", dest="write", action="store_false")
    options = parser.parse_args()
    chosen = [name.strip() for name in options.only.split(",") if name.strip()]
    facts = _common.machine(load_average=True)
    _common.print_facts(facts)
    rows: list[list[str]] = []
    notes: dict[str, str] = {}
    for store in chosen:
        names = (options.small_names if store in SLOW
                 else options.sql_names if store in ("sqlite", "postgresql", "mysql")
                 else options.names)
        workdir = pathlib.Path(tempfile.mkdtemp(prefix=f"tenure-footprint-{store}-"))
        try:
            with STORES[store](workdir) as (url, probe, extra):
                figures = measure(store, url, probe, names, options.gc_after, options.wait)
            notes.update(extra)
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
        print(store, figures, flush=True)
        rows.append([store, *figures.values()])
    header = ["backend", "names", "cycles/s", "records per released name",
              "bytes per released name", "kept after release (gc_after)",
              "fences that went back after removal"]
    lines = [
        "# Benchmark: what a released name costs",
        "",
        "Generated by `bench/footprint_bench.py` "
        f"(`--names {options.names} --sql-names {options.sql_names} "
        f"--small-names {options.small_names} "
        f"--gc-after {options.gc_after:g} --wait {options.wait:g}`): how to read it is in "
        "the script's docstring. "
        "One run; figures, not assertions.",
        "",
        *_common.facts_table(facts),
        "",
        *_common.table(header, rows),
        "",
        *[f"- {store}: {note}" for store, note in notes.items()],
        "",
    ]
    _common.publish("\n".join(lines), ROOT / "docs" / "benchmarks-footprint.md", ROOT,
                    options.write)


if __name__ == "__main__":
    main()
