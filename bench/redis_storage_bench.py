#!/usr/bin/env python3
"""Bounded storage on Redis: a million distinct names locked once each, then the clean-up
period passes; what the server still holds, and whether re-used names' fences went back.

    .venv/bin/python bench/redis_storage_bench.py [--names N] [--processes P]
        [--gc-after S] [--live L] [--url redis://...] [--no-write]

Without ``--url`` it starts a throw-away redis-server (no persistence) on a free loopback
port with the test harness (``tests/servers/redis.py``).

1. ``--live`` names (100) are acquired with a long lease and held throughout.
2. ``--names`` distinct names (1,000,000, per-entity names such as ``order:123456``) are
   each acquired and released once through ``tenure.connect(url, gc_after=S)``, by
   ``--processes`` processes (4) over disjoint shards; the fence of every 1,000th name is
   kept. Reported: cycles/s, then the server's key count and ``used_memory`` right after.
3. The bench waits until the key count stops falling (the records expire ``gc_after`` past
   their last lease, Redis's active expiry removes them in the background), at most
   ``gc_after`` + 60 s. Reported: keys and memory left, and whether every live name is still
   held with its record.
4. The sampled names are acquired again: each new fence must be above the one it got in
   step 2 (its record was removed meanwhile, so only the clock floor can keep it so).

Prints a table and writes docs/benchmarks-redis-storage.md. No assertions: figures only.
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing
import pathlib
import sys
import tempfile
import time
from collections.abc import Iterator

import _common

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the test harness starts the server

import redis  # noqa: E402

import tenure  # noqa: E402

SAMPLE_EVERY = 1000
LIVE_TTL = 3600.0


def name_of(index: int) -> str:
    return f"order:{index}"


def lock_shard(url: str, gc_after: float, start: int, stop: int, step: int) -> dict[int, int]:
    """Acquire and release names ``start``, ``start + step``... below ``stop``; the fences of
    the sampled ones."""
    fences: dict[int, int] = {}
    with tenure.connect(url, gc_after=gc_after) as locks:
        for index in range(start, stop, step):
            lock = locks.lock(name_of(index), ttl=10.0)
            if not lock.acquire(blocking=False):
                raise RuntimeError(f"{name_of(index)} was not free")
            if index % SAMPLE_EVERY == 0:
                assert lock.fence is not None
                fences[index] = lock.fence
            lock.release()
    return fences


def memory(client: redis.Redis) -> tuple[int, int]:
    """The server's key count and used_memory (bytes)."""
    info = client.info("memory")
    return int(client.dbsize()), int(info["used_memory"])


def settle(client: redis.Redis, limit: float) -> float:
    """Seconds until the key count stops falling (unchanged over 3 s), at most ``limit``."""
    began = time.monotonic()
    last, steady_since = -1, time.monotonic()
    while time.monotonic() - began < limit:
        keys = int(client.dbsize())
        if keys != last:
            last, steady_since = keys, time.monotonic()
        elif time.monotonic() - steady_since >= 3.0:
            break
        time.sleep(0.5)
    return time.monotonic() - began


@contextlib.contextmanager
def server(url: str | None) -> Iterator[str]:
    if url is not None:
        yield url
        return
    from tests.servers.redis import start_redis

    started = start_redis(pathlib.Path(tempfile.mkdtemp(prefix="tenure-redis-storage-")),
                          unix_socket=False)
    try:
        yield started.url
    finally:
        started.stop()


def run(url: str, options: argparse.Namespace) -> dict[str, str]:
    client = redis.Redis.from_url(url)
    before_keys, before_memory = memory(client)
    with tenure.connect(url, gc_after=options.gc_after) as locks:
        live = [locks.lock(f"live:{index}", ttl=LIVE_TTL) for index in range(options.live)]
        for lock in live:
            assert lock.acquire(blocking=False)
        began = time.perf_counter()
        with multiprocessing.get_context("spawn").Pool(options.processes) as pool:
            shards = pool.starmap(lock_shard, [
                (url, options.gc_after, start, options.names, options.processes)
                for start in range(options.processes)
            ])
        elapsed = time.perf_counter() - began
        sampled = {index: fence for shard in shards for index, fence in shard.items()}
        after_keys, after_memory = memory(client)
        waited = settle(client, options.gc_after + 60.0)
        left_keys, left_memory = memory(client)
        live_held = sum(lock.owned() for lock in live)
        live_records = sum(locks.inspect(lock.name) is not None for lock in live)
        regressions = 0
        for index, fence in sampled.items():
            again = locks.lock(name_of(index), ttl=10.0)
            assert again.acquire(blocking=False)
            assert again.fence is not None
            regressions += again.fence <= fence
            again.release()
        for lock in live:
            lock.release()
    client.close()
    return {
        "names locked once each": f"{options.names:,}",
        "processes": str(options.processes),
        "acquire + release cycles/s": f"{options.names / elapsed:,.0f}",
        "gc_after": f"{options.gc_after:g} s",
        "seconds the names took": f"{elapsed:,.1f}",
        # Names locked more than about gc_after before the end were already collected: the
        # store holds the names of the last gc_after seconds, not every name ever used.
        "keys before / right after": f"{before_keys:,} / {after_keys:,}",
        "used_memory before / right after": (
            f"{before_memory / 2**20:,.1f} MiB / {after_memory / 2**20:,.1f} MiB"),
        "waited for the clean-up": f"{waited:.1f} s",
        "keys left after the clean-up": (
            f"{left_keys:,} (the {options.live} live names' records and leases)"),
        "used_memory after the clean-up": f"{left_memory / 2**20:,.1f} MiB",
        "live names still held / with their record": (
            f"{live_held} / {live_records} of {options.live}"),
        "re-used names whose fence went back": f"{regressions} of {len(sampled):,}",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--names", type=int, default=1_000_000)
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--gc-after", type=float, default=10.0)
    parser.add_argument("--live", type=int, default=100)
    parser.add_argument("--url")
    parser.add_argument("--no-write", dest="write", action="store_false")
    options = parser.parse_args()
    facts = _common.machine(load_average=True)
    facts["redis-server"] = "a throw-away server, no persistence" if options.url is None \
        else "the server at --url"
    _common.print_facts(facts)
    with server(options.url) as url:
        figures = run(url, options)
    lines = [
        "# Benchmark: bounded storage on Redis",
        "",
        "Generated by `bench/redis_storage_bench.py` "
        f"(`--names {options.names} --processes {options.processes} "
        f"--gc-after {options.gc_after:g} --live {options.live}`): how to read it is in the "
        "script's docstring. One run; figures, not assertions.",
        "",
        *_common.facts_table(facts),
        "",
        *_common.table(["", "figure"], figures.items()),
        "",
        "A lock's record (its name and fence) expires `gc_after` past the end of its last "
        "lease; fences never go back when it is gone, because each is at least the server's "
        "clock in microseconds (docs/backends/redis.md, Fences and clean-up). \"Right "
        "after\" already excludes the names locked more than about `gc_after` before the "
        "last one: while names keep coming, the store holds those of the last `gc_after` "
        "seconds (two keys each: the record and, for a second, the wake list a release "
        "pushes to), not every name ever used.",
        "",
    ]
    _common.publish("\n".join(lines), ROOT / "docs" / "benchmarks-redis-storage.md", ROOT,
                    options.write)


if __name__ == "__main__":
    main()
