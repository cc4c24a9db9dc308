#!/usr/bin/env python3
"""tenure's MongoDB backend against the raw floor, side by side, on one server.

    .venv/bin/python bench/mongodb_bench.py [--seconds S] [--rounds R] [--handoffs N]
        [--url URL] [--no-write]

Without ``--url`` it starts a throw-away mongoeco server (the stand-in the tests use; see
``tests/servers/mongodb.py``) on a free loopback port. Figures from mongoeco, a MongoDB
server written in Python, say how tenure compares with the raw floor on the same server, not
how fast a real ``mongod`` is.

1. Uncontended cycles: one process, acquire + release of one name in a loop, in ``--rounds``
   interleaved rounds of ``--seconds``/``--rounds``, best round kept; cycles per second, for
   - tenure (threads) and tenure under asyncio, default options (``w: majority``);
   - the raw floor: one ``find_one_and_update`` (upsert with ``$setOnInsert`` of a random
     token) + one ``delete_one`` (filtered on that token) per cycle, with the same client
     settings and write concern: the least any MongoDB lock can send, and no lease, no
     fence, no holder, no expiry judged anywhere;
   - tenure's own two writes (its acquire pipeline and release update), bare, from a loop,
     on a collection with the same clean-up index: what the lock logic costs above them.
2. Contended handoff: two processes take turns on one lock. The holder waits until the other
   is blocked in acquire, holds 5..55 ms more (uniform, so the release lands anywhere in a
   poller's cycle), stamps ``time.monotonic_ns()`` (one clock for the host) just before
   release; the waiter stamps when its acquire returns. tenure with its defaults (waiters in
   another process back off, jittered, doubling from 1 ms to 50 ms) against the raw floor
   retrying its upsert every 50 ms (and, for reference, every 5 ms).

Prints a table and writes docs/benchmarks-mongodb.md with ratios. No assertions: figures only.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import functools
import multiprocessing
import os
import pathlib
import secrets
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from typing import Any

import _common

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the test harness starts the server

import pymongo  # noqa: E402
from pymongo.errors import DuplicateKeyError  # noqa: E402

import tenure  # noqa: E402
from tenure._types import Holder  # noqa: E402
from tenure.backends.mongodb import _documents  # noqa: E402
from tenure.backends.mongodb._config import DEFAULT_GC_AFTER  # noqa: E402

REPORT = ROOT / "docs" / "benchmarks-mongodb.md"
RAW_POLL = 0.05
RAW_FAST_POLL = 0.005
NAME = "bench:lock"
GC_AFTER_MS = round(DEFAULT_GC_AFTER * 1000)


@dataclasses.dataclass(frozen=True)
class Subject:
    label: str
    kind: str  # "tenure", "tenure-async", "raw" or "bare"
    poll: float = RAW_POLL  # raw only: seconds between two attempts while busy


class RawLock:
    """The raw floor: the first of the designs this backend replaces, minus its expiry."""

    collection_name = "raw_locks"

    def __init__(self, url: str, poll: float) -> None:
        self.client: pymongo.MongoClient[dict[str, Any]] = pymongo.MongoClient(
            url, appname="tenure-bench-raw", timeoutMS=5000, serverSelectionTimeoutMS=5000,
            connectTimeoutMS=5000,
        )
        self.collection = self.client["tenure"].get_collection(
            self.collection_name, write_concern=pymongo.WriteConcern(w="majority"))
        self.poll = poll
        self.token = ""

    def try_acquire(self) -> bool:
        token = secrets.token_hex(16)
        try:
            document = self.collection.find_one_and_update(
                {"_id": NAME}, {"$setOnInsert": {"token": token}}, upsert=True,
                return_document=pymongo.ReturnDocument.AFTER,
            )
        except DuplicateKeyError:
            return False
        if document is not None and document.get("token") == token:
            self.token = token
            return True
        return False

    def acquire(self) -> None:
        while not self.try_acquire():
            time.sleep(self.poll)

    def release(self) -> None:
        self.collection.delete_one({"_id": NAME, "token": self.token})

    def close(self) -> None:
        self.client.close()


class BareLock(RawLock):
    """tenure's own two writes, sent bare with PyMongo: its acquire pipeline and release."""

    collection_name = "bare_locks"
    holder = Holder("bench", os.getpid(), "bench")

    def __init__(self, url: str, poll: float) -> None:
        super().__init__(url, poll)
        # The same clean-up index tenure creates: the server maintains it on every write.
        self.collection.create_index([("gc_at", 1)], name="tenure_gc_at", expireAfterSeconds=0)

    def try_acquire(self) -> bool:
        token = secrets.token_hex(16)
        update = _documents.acquire_update(token, 30_000, self.holder, GC_AFTER_MS)
        document = self.collection.find_one_and_update(
            _documents.name_filter(NAME), update, upsert=True,
            return_document=pymongo.ReturnDocument.AFTER,
        )
        if document is not None and document.get("token") == token:
            self.token = token
            return True
        return False

    def release(self) -> None:
        self.collection.update_one(
            _documents.held_by(NAME, self.token), _documents.free_update(GC_AFTER_MS))


def clear(url: str) -> None:
    """Forget the raw and bare locks' documents (a run killed midway may leave one held)."""
    # (delete_many, not drop: the bare collection keeps its index.)
    client: pymongo.MongoClient[dict[str, Any]] = pymongo.MongoClient(url)
    try:
        for name in (RawLock.collection_name, BareLock.collection_name):
            client["tenure"][name].delete_many({})
    finally:
        client.close()


def make_lock(subject: Subject, url: str) -> tuple[_common.Pair, Callable[[], None]]:
    """(acquire, release) callables for ``subject``, and a clean-up."""
    if subject.kind in ("raw", "bare"):
        raw = RawLock(url, subject.poll) if subject.kind == "raw" else BareLock(url, 0.05)
        return (raw.acquire, raw.release), raw.close
    locks = tenure.connect(url)
    lock = locks.lock(NAME, ttl=30.0)
    return (lock.acquire, lock.release), locks.close


# ---- uncontended ----------------------------------------------------------------------------


def uncontended(subject: Subject, url: str, seconds: float) -> tuple[float, int]:
    """(cycles per second, cycles) of acquire + release in one process, for ``seconds``."""
    if subject.kind == "tenure-async":
        return asyncio.run(uncontended_async(url, seconds))
    # (The 20 warm-up cycles: connections, the index.)
    return _common.uncontended(
        functools.partial(make_lock, subject, url), seconds, warmup=20, batch=20)


async def uncontended_async(url: str, seconds: float) -> tuple[float, int]:
    async with tenure.connect_async(url) as locks:
        lock = locks.lock(NAME, ttl=30.0)
        return await _common.async_timed_loop(lock, seconds, warmup=20, batch=20)


# ---- report -----------------------------------------------------------------------------------


def machine(url: str) -> dict[str, str]:
    client: pymongo.MongoClient[dict[str, Any]] = pymongo.MongoClient(url)
    try:
        build = client.admin.command("buildInfo")
    finally:
        client.close()
    server = f"{build.get('version', '?')} ({build.get('gitVersion', '?')})"
    return {
        **_common.machine(load_average=True),
        "server": server,
        "pymongo": pymongo.__version__,
        "tenure": tenure.__version__,
    }


@contextlib.contextmanager
def server_url(given: str | None) -> Iterator[tuple[str, str]]:
    """(url, how it was obtained)."""
    if given:
        yield given, "given with --url"
        return
    from tests.servers.mongodb import MongoecoServer

    with tempfile.TemporaryDirectory(prefix="tenure-bench-") as directory:
        server = MongoecoServer(pathlib.Path(directory))
        server.start()
        try:
            engine = os.environ.get("TENURE_MONGOECO_ENGINE", "memory")
            yield server.url, f"mongoeco started by the benchmark ({engine} engine)"
        finally:
            server.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=10.0,
                        help="seconds per uncontended measurement (default: 10)")
    parser.add_argument("--rounds", type=int, default=5,
                        help="interleaved rounds per uncontended measurement (default: 5)")
    parser.add_argument("--handoffs", type=int, default=200,
                        help="handoffs per handoff measurement (default: 200)")
    parser.add_argument("--url", help="a MongoDB URL to use instead of starting mongoeco")
    parser.add_argument("--no-write", action="store_true",
                        help=f"print only; do not write {REPORT.relative_to(ROOT)}")
    args = parser.parse_args()
    context = multiprocessing.get_context("spawn")

    tenure_sync = Subject("tenure mongodb", "tenure")
    tenure_async = Subject("tenure mongodb (asyncio)", "tenure-async")
    raw = Subject("raw floor", "raw", RAW_POLL)
    bare = Subject("tenure's writes, bare", "bare")
    raw_fast = Subject(f"raw floor, poll {RAW_FAST_POLL * 1000:g} ms", "raw", RAW_FAST_POLL)
    raw_slow = Subject(f"raw floor, poll {RAW_POLL * 1000:g} ms", "raw", RAW_POLL)

    with server_url(args.url) as (url, origin):
        facts = {**machine(url), "server from": origin}
        _common.print_facts(facts)

        rates = _common.best_of_rounds({
            subject.label: functools.partial(
                uncontended, subject, url, args.seconds / args.rounds)
            for subject in (tenure_sync, raw, bare, tenure_async)
        }, args.rounds, before=functools.partial(clear, url))
        for label, (rate, cycles) in rates.items():
            print(f"uncontended {label:<30} {rate:>9,.0f} cycles/s "
                  f"({1e3 / rate:,.2f} ms per acquire+release, best of {args.rounds} rounds, "
                  f"{cycles:,} cycles)", flush=True)

        handoffs = _common.handoffs(context, {
            subject.label: functools.partial(make_lock, subject, url)
            for subject in (tenure_sync, raw_slow, raw_fast)
        }, args.handoffs, width=30, timeout=600, before=functools.partial(clear, url))

    report = render(facts, rates, handoffs, args, tenure_sync, tenure_async, raw, bare,
                    raw_slow, raw_fast)
    _common.publish(report, REPORT, ROOT, write=not args.no_write)
    return 0


def render(
    facts: dict[str, str],
    rates: dict[str, tuple[float, int]],
    handoffs: dict[str, list[int]],
    args: argparse.Namespace,
    tenure_sync: Subject,
    tenure_async: Subject,
    raw: Subject,
    bare: Subject,
    raw_slow: Subject,
    raw_fast: Subject,
) -> str:
    ms = _common.ms
    ours, floor, writes = (
        rates[tenure_sync.label][0], rates[raw.label][0], rates[bare.label][0])
    ours_async = rates[tenure_async.label][0]
    mine, theirs = handoffs[tenure_sync.label], handoffs[raw_slow.label]
    lines = [
        "# Benchmark: tenure's MongoDB backend vs the raw floor",
        "",
        "Generated by `.venv/bin/python bench/mongodb_bench.py`; rerun it to refresh. The "
        "server is the mongoeco stand-in (a MongoDB wire-protocol server written in Python) "
        "unless the table says otherwise: absolute figures say little about a real `mongod`; "
        "the ratios compare tenure with the least a MongoDB lock can send to the same server. "
        "The machine is shared, so treat differences under ~20% as noise.",
        "",
        *_common.facts_table(facts),
        "",
        f"## Uncontended acquire + release (one process, {args.seconds:g} s each, best of "
        f"{args.rounds} interleaved rounds)",
        "",
        *_common.rates_table(rates, "ms"),
        "",
        f"Ratio tenure / raw floor: **{ours / floor:.2f}x** the throughput (asyncio: "
        f"**{ours_async / floor:.2f}x**). Both send two writes per cycle with `w: majority`. "
        "The raw floor's are the simplest there are: an upsert with `$setOnInsert` and a "
        "`delete_one`; it has no lease (a crashed holder's lock stays forever), no fence, no "
        "holder, and its delete leaves nothing to keep a fence in. tenure's acquire is one "
        "`find_one_and_update` with a three-stage pipeline update judged by `$$NOW`, its "
        "release one `update_one` that keeps the document. The bare row sends exactly "
        "those two writes from a loop, to a collection with the same TTL index: tenure / "
        f"bare = **{ours / writes:.2f}x** measures the lock logic's own cost in the client "
        "(near 1: lost next to two round trips); bare / raw = "
        f"**{writes / floor:.2f}x** measures what the server spends on pipeline updates and "
        "the TTL index instead of a plain upsert and delete. On mongoeco, which interprets "
        "pipelines in Python, that is the whole gap; a real `mongod` evaluates them natively.",
        "",
        f"## Handoff latency (2 processes taking turns, {args.handoffs} handoffs per lock)",
        "",
        "From the holder's `time.monotonic_ns()` just before release to the waiter's acquire "
        f"returning. The holder releases {_common.HOLD_RANGE[0] * 1000:g}.."
        f"{_common.HOLD_RANGE[1] * 1000:g} ms "
        "(uniform) after the waiter entered acquire, so releases land anywhere in the waiter's "
        "poll cycle. tenure with its defaults: a waiter in another process backs off "
        "(jittered, doubling from 1 ms) up to 50 ms, never past the holder's remaining lease; "
        "no change streams (see docs/backends/mongodb.md). The raw floor retries its upsert "
        f"every {RAW_POLL * 1000:g} ms (every {RAW_FAST_POLL * 1000:g} ms for reference).",
        "",
        *_common.handoff_table(handoffs),
        "",
        f"Ratios tenure / raw floor polling every {RAW_POLL * 1000:g} ms (lower is better): "
        f"p50 **{ms(mine, 0.5) / ms(theirs, 0.5):.2f}**, p99 "
        f"**{ms(mine, 0.99) / ms(theirs, 0.99):.2f}**; against the "
        f"{RAW_FAST_POLL * 1000:g} ms poller: p50 "
        f"**{ms(mine, 0.5) / ms(handoffs[raw_fast.label], 0.5):.2f}**. Polling every "
        f"{RAW_FAST_POLL * 1000:g} ms sends up to 200 writes a second per waiter for as long "
        "as it waits; tenure's back-off starts as fast and slows to 20 a second. With a few "
        "hundred handoffs, p99 is the 2nd-3rd worst sample: read it as an order of magnitude.",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
