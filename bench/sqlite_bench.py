#!/usr/bin/env python3
"""tenure's SQLite backend against filelock, the usual one-host peer, in one process tree.

    .venv/bin/python bench/sqlite_bench.py [--seconds S] [--handoffs N] [--no-write]

Two measurements, each run for tenure (sqlite, default settings, a file in a temp dir) and for
filelock.FileLock (a file in the same temp dir):

1. Uncontended: one process, acquire + release of one name in a loop for ``--seconds`` (in 3
   interleaved rounds, best round kept); cycles per second. tenure's memory:// is shown for
   reference (no I/O at all).
2. Handoff: two processes take turns on one lock. The holder waits until the other process is
   blocked in acquire, holds a little longer (uniform 5..55 ms, so the release falls anywhere
   in the waiter's poll cycle), stamps ``time.monotonic_ns()`` (CLOCK_MONOTONIC, one clock for
   the whole host) just before release; the waiter stamps when its acquire returns. The
   releaser never barges back in: it waits until the other took the lock. p50/p99 over
   ``--handoffs`` handoffs. Both libraries run with their defaults: filelock polls every
   0.05 s, tenure's SQLite waiters back off up to 0.02 s. A filelock row polling every 5 ms is
   shown for reference; the ratios use the defaults.

Prints a table and writes docs/benchmarks-sqlite.md (machine, versions, date, figures, ratios
tenure / filelock). Bounded to about a minute with the defaults. No assertions: figures only.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import multiprocessing
import os
import pathlib
import platform
import random
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from multiprocessing.context import SpawnContext
from typing import Any

import filelock

import tenure

ROOT = pathlib.Path(__file__).resolve().parent.parent
REPORT = ROOT / "docs" / "benchmarks-sqlite.md"
HOLD_RANGE = (0.005, 0.055)
FILELOCK_FAST_POLL = 0.005
ROUNDS = 3
Pair = tuple[Callable[[], Any], Callable[[], Any]]


@dataclasses.dataclass(frozen=True)
class Subject:
    label: str
    kind: str  # "tenure" or "filelock"
    target: str  # a tenure URL or a lock file path
    poll_interval: float | None = None  # filelock only; None: its default


def make_lock(subject: Subject) -> tuple[Pair, Callable[[], None]]:
    """(acquire, release) callables for ``subject``, and a clean-up."""
    if subject.kind == "tenure":
        locks = tenure.connect(subject.target)
        lock = locks.lock("bench:lock", ttl=30.0)
        return (lock.acquire, lock.release), locks.close
    options = {} if subject.poll_interval is None else {"poll_interval": subject.poll_interval}
    file_lock = filelock.FileLock(subject.target, **options)
    return (file_lock.acquire, file_lock.release), lambda: None


# ---- uncontended ----------------------------------------------------------------------------


def uncontended(subject: Subject, seconds: float) -> tuple[float, int]:
    """(cycles per second, cycles) of acquire + release in one process, for ``seconds``."""
    (acquire, release), close = make_lock(subject)
    try:
        for _ in range(50):  # warm-up: connections, schema, page cache
            acquire()
            release()
        cycles = 0
        started = time.perf_counter()
        deadline = started + seconds
        while True:
            for _ in range(50):
                acquire()
                release()
            cycles += 50
            now = time.perf_counter()
            if now >= deadline:
                return cycles / (now - started), cycles
    finally:
        close()


# ---- handoff ----------------------------------------------------------------------------------


def pingpong(
    subject: Subject,
    index: int,
    processes: int,
    rounds: int,
    shared: dict[str, Any],
    barrier: Any,
    results: Any,
) -> None:
    """One of the processes taking turns; puts its handoff latencies (ns) on ``results``."""
    (acquire, release), close = make_lock(subject)
    released_at, generation, waiting, count, stop = (
        shared["released_at"], shared["generation"], shared["waiting"], shared["count"],
        shared["stop"],
    )
    rng = random.Random(index)
    latencies: list[int] = []
    mine = -1  # the generation of my last acquisition
    barrier.wait()
    try:
        while True:
            while generation.value == mine and not stop.value:
                time.sleep(0.0002)  # after my release: wait for another to take it, no barging
            if stop.value:
                break
            with waiting.get_lock():
                waiting.value += 1
            acquire()
            acquired = time.monotonic_ns()
            with waiting.get_lock():
                waiting.value -= 1
            if stop.value:
                release()
                break
            if released_at.value:
                latencies.append(acquired - released_at.value)
            with generation.get_lock():
                generation.value += 1
                mine = generation.value
            while waiting.value < processes - 1 and not stop.value:
                time.sleep(0.0002)  # until every other process is in acquire
            time.sleep(rng.uniform(*HOLD_RANGE))
            with count.get_lock():
                count.value += 1
                done = count.value >= rounds
            if done:
                stop.value = 1
            released_at.value = time.monotonic_ns()
            release()
            if done:
                break
    finally:
        close()
        results.put(latencies)


def handoff(context: SpawnContext, subject: Subject, rounds: int, processes: int = 2) -> list[int]:
    shared = {
        "released_at": context.RawValue("q", 0),
        "generation": context.Value("q", 0),
        "waiting": context.Value("i", 0),
        "count": context.Value("i", 0),
        "stop": context.RawValue("i", 0),
    }
    barrier = context.Barrier(processes)
    results = context.Queue()
    workers = [
        context.Process(
            target=pingpong, args=(subject, index, processes, rounds, shared, barrier, results)
        )
        for index in range(processes)
    ]
    for worker in workers:
        worker.start()
    latencies: list[int] = []
    for _ in workers:
        latencies += results.get(timeout=300)
    for worker in workers:
        worker.join(timeout=30)
    return latencies


def percentile(values: list[int], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


# ---- report -----------------------------------------------------------------------------------


def machine() -> dict[str, str]:
    model = "unknown"
    try:
        for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "cpu": model,
        "nproc": str(os.cpu_count()),
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
        "tenure": tenure.__version__,
        "filelock": filelock.__version__,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=3.0,
                        help="seconds per uncontended measurement (default: 3)")
    parser.add_argument("--handoffs", type=int, default=250,
                        help="handoffs per handoff measurement (default: 250)")
    parser.add_argument("--no-write", action="store_true",
                        help=f"print only; do not write {REPORT.relative_to(ROOT)}")
    args = parser.parse_args()
    context = multiprocessing.get_context("spawn")
    facts = machine()
    print("  ".join(f"{key}: {value}" for key, value in facts.items()), flush=True)

    with tempfile.TemporaryDirectory(prefix="tenure-bench-") as directory:
        here = pathlib.Path(directory)
        sqlite = Subject("tenure sqlite", "tenure", f"sqlite:///{here / 'bench.db'}")
        memory = Subject("tenure memory://", "tenure", "memory://")
        file_lock = Subject("filelock", "filelock", str(here / "bench.lock"))
        fast_file_lock = Subject(
            f"filelock poll_interval={FILELOCK_FAST_POLL}", "filelock",
            str(here / "bench-fast.lock"), FILELOCK_FAST_POLL,
        )

        # Interleaved rounds, best of each: other tenants of a shared machine slow some
        # rounds down, never speed one up.
        rates: dict[str, tuple[float, int]] = {}
        for _ in range(ROUNDS):
            for subject in (sqlite, file_lock, memory):
                rate, cycles = uncontended(subject, args.seconds / ROUNDS)
                best, total = rates.get(subject.label, (0.0, 0))
                rates[subject.label] = (max(best, rate), total + cycles)
        for label, (rate, cycles) in rates.items():
            print(f"uncontended {label:<34} {rate:>10,.0f} cycles/s "
                  f"({1e6 / rate:,.1f} µs per acquire+release, best of {ROUNDS} rounds, "
                  f"{cycles:,} cycles)", flush=True)

        handoffs: dict[str, list[int]] = {}
        for subject in (sqlite, file_lock, fast_file_lock):
            started = time.perf_counter()
            # One more turn than handoffs: the first acquisition follows no release.
            handoffs[subject.label] = handoff(context, subject, args.handoffs + 1)
            values = handoffs[subject.label]
            print(f"handoff     {subject.label:<34} p50 {percentile(values, 0.5) / 1e6:7.2f} ms"
                  f"  p99 {percentile(values, 0.99) / 1e6:7.2f} ms  ({len(values)} handoffs, "
                  f"{time.perf_counter() - started:.1f} s)", flush=True)

    report = render(facts, rates, handoffs, args, sqlite, file_lock, memory, fast_file_lock)
    if not args.no_write:  # before printing it: `| head` must not lose the file
        REPORT.parent.mkdir(exist_ok=True)
        REPORT.write_text(report)
    print()
    print(report)
    if not args.no_write:
        print(f"wrote {REPORT.relative_to(ROOT)}")
    return 0


def render(
    facts: dict[str, str],
    rates: dict[str, tuple[float, int]],
    handoffs: dict[str, list[int]],
    args: argparse.Namespace,
    sqlite: Subject,
    file_lock: Subject,
    memory: Subject,
    fast_file_lock: Subject,
) -> str:
    def ms(values: list[int], fraction: float) -> float:
        return percentile(values, fraction) / 1e6

    ours, theirs = rates[sqlite.label][0], rates[file_lock.label][0]
    lines = [
        "# Benchmark: tenure's SQLite backend vs filelock",
        "",
        "Generated by `.venv/bin/python bench/sqlite_bench.py`; rerun it to refresh. One host, "
        "one process tree; the machine is shared, so treat differences under ~20% as noise.",
        "",
        "| | |",
        "|---|---|",
        *(f"| {key} | {value} |" for key, value in facts.items()),
        "",
        f"## Uncontended acquire + release (one process, {args.seconds:g} s each, best of "
        f"{ROUNDS} interleaved rounds)",
        "",
        "| lock | cycles/s | µs per cycle |",
        "|---|---:|---:|",
        *(
            f"| {label} | {rate:,.0f} | {1e6 / rate:,.1f} |"
            for label, (rate, _) in rates.items()
        ),
        "",
        f"Ratio tenure sqlite / filelock: **{ours / theirs:.2f}x** the throughput. tenure's "
        "SQLite acquire is a `BEGIN IMMEDIATE` upsert and its release an `UPDATE` in a WAL "
        "database (`synchronous=normal`), so it pays a write transaction where filelock pays "
        "an `open` + `flock`; in exchange it records the holder, a lease that expires, and a "
        f"fencing token. memory:// ({rates[memory.label][0]:,.0f} cycles/s) is the cost of the "
        "lock logic alone.",
        "",
        f"## Handoff latency (2 processes taking turns, {args.handoffs} handoffs per lock)",
        "",
        "From the holder's `time.monotonic_ns()` just before release to the waiter's acquire "
        f"returning. The holder releases {HOLD_RANGE[0] * 1000:g}..{HOLD_RANGE[1] * 1000:g} ms "
        "(uniform) after the waiter entered acquire, so releases land anywhere in the waiter's "
        "poll cycle. Defaults on both sides: filelock polls every 0.05 s; tenure's SQLite "
        "waiters in other processes back off (jittered, doubling from 1 ms) up to 0.02 s, "
        "with no cross-process wake-up.",
        "",
        "| lock | p50 ms | p99 ms | mean ms | handoffs |",
        "|---|---:|---:|---:|---:|",
        *(
            f"| {label} | {ms(values, 0.5):.2f} | {ms(values, 0.99):.2f} | "
            f"{statistics.fmean(values) / 1e6:.2f} | {len(values)} |"
            for label, values in handoffs.items()
        ),
        "",
        "Ratios tenure sqlite / filelock (defaults; lower is better): p50 "
        f"**{ms(handoffs[sqlite.label], 0.5) / ms(handoffs[file_lock.label], 0.5):.2f}**, p99 "
        f"**{ms(handoffs[sqlite.label], 0.99) / ms(handoffs[file_lock.label], 0.99):.2f}**. "
        f"The `{fast_file_lock.label}` row is for reference only: polling faster shortens "
        "filelock's handoff at the cost of more wake-ups while waiting. With a few hundred "
        "handoffs, p99 is the 2nd-3rd worst sample: read it as an order of magnitude.",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
