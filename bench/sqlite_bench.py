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
   0.05 s; tenure's SQLite waiters are woken by the release (a datagram to the head of the
   lock's queue). A filelock row polling every 5 ms is shown for reference; the ratios use
   the defaults.

Prints a table and writes docs/benchmarks-sqlite.md (machine, versions, date, figures, ratios
tenure / filelock). Bounded to about a minute with the defaults. No assertions: figures only.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import multiprocessing
import os
import pathlib
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import _common
import filelock

import tenure
from tenure.backends.sqlite import _lock_sql as sqlite_store
from tenure.backends.sqlite._clock import register_clock

ROOT = pathlib.Path(__file__).resolve().parent.parent
REPORT = ROOT / "docs" / "benchmarks-sqlite.md"
FILELOCK_FAST_POLL = 0.005
ROUNDS = 3


@dataclasses.dataclass(frozen=True)
class Subject:
    label: str
    kind: str  # "tenure" or "filelock"
    target: str  # a tenure URL or a lock file path
    poll_interval: float | None = None  # filelock only; None: its default


def make_lock(subject: Subject) -> tuple[_common.Pair, Callable[[], None]]:
    """(acquire, release) callables for ``subject``, and a clean-up."""
    if subject.kind == "raw":
        return raw_statements(subject.target)
    if subject.kind == "tenure":
        locks = tenure.connect(subject.target)
        lock = locks.lock("bench:lock", ttl=30.0)
        return (lock.acquire, lock.release), locks.close
    options = {} if subject.poll_interval is None else {"poll_interval": subject.poll_interval}
    file_lock = filelock.FileLock(subject.target, **options)
    return (file_lock.acquire, file_lock.release), lambda: None


def raw_statements(path: str) -> tuple[_common.Pair, Callable[[], None]]:
    """The floor under tenure's SQLite lock: its own uncontended acquire (the ``ACQUIRE``
    upsert, a transaction of its own, reading the fence floor through the same SQL clock) and
    owner-checked release statements, run as plain sqlite3 calls with no lock logic around
    them. The statements are imported, not copied, so the floor tracks the backend."""
    tenure.connect(f"sqlite:///{path}").close()  # the schema, as tenure creates it
    connection = sqlite3.connect(path, isolation_level=None, timeout=10.0)
    connection.execute("PRAGMA synchronous = normal")
    register_clock(connection)
    params = {"name": "bench:lock", "token": "raw", "ttl": 30.0,
              "host": "bench", "pid": 1, "thread": "main", "value": None,
              "seq": sqlite_store.NOT_QUEUED}
    release_params = {"name": "bench:lock", "token": "raw"}

    def acquire() -> bool:
        return bool(connection.execute(sqlite_store.ACQUIRE, params).fetchall())

    def release() -> None:
        connection.execute(sqlite_store.RELEASE, release_params).fetchall()

    return (acquire, release), connection.close


# ---- contention: N processes looping on one lock --------------------------------------------


@dataclasses.dataclass(frozen=True)
class Contention:
    acquisitions: list[int]  # per process
    cross: int  # acquisitions that followed another process's release
    handoff_ns: list[int]  # release stamp of another process -> this acquire returning
    longest_wait_ns: int  # longest time one process spent inside acquire


def contender(subject: Subject, index: int, seconds: float, start: Any,
              last_holder: Any, released_ns: Any, results: Any) -> None:
    """Loops acquire / release until ``seconds`` have passed since ``start``. While holding the
    lock it reads who held it before and when they released, so nothing here is racy."""
    (acquire, release), close = make_lock(subject)
    count = cross = 0
    handoff: list[int] = []
    longest = 0
    start.wait()
    deadline = time.monotonic() + seconds
    try:
        while time.monotonic() < deadline:
            entered = time.monotonic_ns()
            acquire()
            got = time.monotonic_ns()
            longest = max(longest, got - entered)
            count += 1
            previous = last_holder.value
            if previous not in (-1, index):
                cross += 1
                handoff.append(got - released_ns.value)
            last_holder.value = index
            released_ns.value = time.monotonic_ns()
            release()
    finally:
        close()
    results.put((index, count, cross, handoff, longest))


def contention(context: multiprocessing.context.SpawnContext, subject: Subject,
               processes: int, seconds: float) -> Contention:
    start = context.Event()
    last_holder = context.Value("i", -1, lock=False)
    released_ns = context.Value("q", 0, lock=False)
    results = context.Queue()
    workers = [
        context.Process(target=contender, args=(
            subject, index, seconds, start, last_holder, released_ns, results))
        for index in range(processes)
    ]
    for worker in workers:
        worker.start()
    start.set()
    rows = [results.get(timeout=seconds + 60) for _ in workers]
    for worker in workers:
        worker.join()
    rows.sort()
    return Contention(
        acquisitions=[row[1] for row in rows],
        cross=sum(row[2] for row in rows),
        handoff_ns=sorted(ns for row in rows for ns in row[3]),
        longest_wait_ns=max(row[4] for row in rows),
    )


def contention_line(label: str, result: Contention) -> str:
    total = sum(result.acquisitions)
    p50 = _common.ms(result.handoff_ns, 0.5) if result.handoff_ns else float("nan")
    return (f"| {label} | {total:,} | {100 * result.cross / max(total, 1):.1f}% | "
            f"{result.cross:,} | {p50:.2f} | "
            f"{result.longest_wait_ns / 1e6:,.0f} | "
            f"{min(result.acquisitions):,}..{max(result.acquisitions):,} |")


def idle_waiter(subject: Subject, seconds: float, results: Any) -> None:
    """Blocks in one acquire for ``seconds`` on a lock held elsewhere; reports the share of a
    core this process burnt meanwhile (user + system time over wall time)."""
    (acquire, _), close = make_lock(subject)
    before, started = os.times(), time.monotonic()
    try:
        with contextlib.suppress(filelock.Timeout):  # tenure returns False instead
            acquire(timeout=seconds)
    finally:
        after, ended = os.times(), time.monotonic()
        close()
    busy = (after.user - before.user) + (after.system - before.system)
    results.put(busy / (ended - started))


def idle_waiter_cpu(context: multiprocessing.context.SpawnContext, subject: Subject,
                    seconds: float) -> float:
    """Share of one core used by a waiter blocked ``seconds`` behind a holder in this
    process."""
    (acquire, release), close = make_lock(subject)
    acquire()
    try:
        results = context.Queue()
        waiter = context.Process(target=idle_waiter, args=(subject, seconds, results))
        waiter.start()
        share = float(results.get(timeout=seconds + 60))
        waiter.join()
    finally:
        release()
        close()
    return share


# ---- uncontended ----------------------------------------------------------------------------


def uncontended(subject: Subject, seconds: float) -> tuple[float, int]:
    """(cycles per second, cycles) of acquire + release in one process, for ``seconds``."""
    # (The 50 warm-up cycles: connections, schema, page cache.)
    return _common.uncontended(
        functools.partial(make_lock, subject), seconds, warmup=50, batch=50)


def cpu_per_cycle(subjects: list[Subject], cycles: int = 3000) -> dict[str, float]:
    """label -> CPU microseconds (user + system, this process) per acquire + release, best of
    ROUNDS interleaved rounds of ``cycles``: the work a cycle costs, which other tenants of
    a shared machine cannot inflate the way they inflate wall-clock throughput."""
    opened = {subject.label: make_lock(subject) for subject in subjects}
    best = dict.fromkeys(opened, float("inf"))
    try:
        for _ in range(ROUNDS):
            for label, ((acquire, release), _) in opened.items():
                for _ in range(50):
                    acquire()
                    release()
                started = time.process_time()
                for _ in range(cycles):
                    acquire()
                    release()
                best[label] = min(best[label], (time.process_time() - started) / cycles * 1e6)
    finally:
        for _, close in opened.values():
            close()
    return best


# ---- report -----------------------------------------------------------------------------------


def machine() -> dict[str, str]:
    return {
        **_common.machine(),
        # The machine may be shared: contention figures depend on the CPU left to us.
        "load average at start": " ".join(f"{load:.1f}" for load in os.getloadavg()),
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
    parser.add_argument("--processes", type=int, default=8,
                        help="processes in the contention run (default: 8)")
    parser.add_argument("--contention-seconds", type=float, default=8.0,
                        help="seconds of the contention run (default: 8)")
    parser.add_argument("--idle-seconds", type=float, default=3.0,
                        help="seconds a waiter stays blocked for the idle CPU figure "
                             "(default: 3)")
    parser.add_argument("--no-write", action="store_true",
                        help=f"print only; do not write {REPORT.relative_to(ROOT)}")
    args = parser.parse_args()
    context = multiprocessing.get_context("spawn")
    facts = machine()
    _common.print_facts(facts)

    with tempfile.TemporaryDirectory(prefix="tenure-bench-") as directory:
        here = pathlib.Path(directory)
        sqlite = Subject("tenure sqlite", "tenure", f"sqlite:///{here / 'bench.db'}")
        memory = Subject("tenure memory://", "tenure", "memory://")
        file_lock = Subject("filelock", "filelock", str(here / "bench.lock"))
        fast_file_lock = Subject(
            f"filelock poll_interval={FILELOCK_FAST_POLL}", "filelock",
            str(here / "bench-fast.lock"), FILELOCK_FAST_POLL,
        )

        raw = Subject("raw sqlite3 statements (floor)", "raw", str(here / "raw.db"))
        rates = _common.best_of_rounds({
            subject.label: functools.partial(uncontended, subject, args.seconds / ROUNDS)
            for subject in (sqlite, raw, file_lock, memory)
        }, ROUNDS)
        for label, (rate, cycles) in rates.items():
            print(f"uncontended {label:<34} {rate:>10,.0f} cycles/s "
                  f"({1e6 / rate:,.1f} µs per acquire+release, best of {ROUNDS} rounds, "
                  f"{cycles:,} cycles)", flush=True)

        cpu = cpu_per_cycle([sqlite, raw, file_lock, memory])
        for label, micros in cpu.items():
            print(f"uncontended CPU {label:<30} {micros:>8.1f} µs per acquire+release",
                  flush=True)

        handoffs = _common.handoffs(context, {
            subject.label: functools.partial(make_lock, subject)
            for subject in (sqlite, file_lock, fast_file_lock)
        }, args.handoffs, width=34)

        contended: dict[str, Contention] = {}
        for subject in (sqlite, file_lock):
            contended[subject.label] = contention(
                context, subject, args.processes, args.contention_seconds)
            print("contention " + contention_line(subject.label, contended[subject.label]),
                  flush=True)

        idle = {subject.label: idle_waiter_cpu(context, subject, args.idle_seconds)
                for subject in (sqlite, file_lock)}
        for label, share in idle.items():
            print(f"idle waiter CPU {label:<30} {100 * share:.2f}% of a core", flush=True)

    report = render(facts, rates, cpu, handoffs, contended, idle, args,
                    sqlite, raw, file_lock, memory, fast_file_lock)
    _common.publish(report, REPORT, ROOT, write=not args.no_write)
    return 0


def render(
    facts: dict[str, str],
    rates: dict[str, tuple[float, int]],
    cpu: dict[str, float],
    handoffs: dict[str, list[int]],
    contended: dict[str, Contention],
    idle: dict[str, float],
    args: argparse.Namespace,
    sqlite: Subject,
    raw: Subject,
    file_lock: Subject,
    memory: Subject,
    fast_file_lock: Subject,
) -> str:
    ms = _common.ms
    ours, theirs = rates[sqlite.label][0], rates[file_lock.label][0]
    lines = [
        "# Benchmark: tenure's SQLite backend vs filelock",
        "",
        "Generated by `.venv/bin/python bench/sqlite_bench.py`; rerun it to refresh. One host, "
        "one process tree; the machine is shared, so treat differences under ~20% as noise.",
        "",
        *_common.facts_table(facts),
        "",
        f"## Uncontended acquire + release (one process, {args.seconds:g} s each, best of "
        f"{ROUNDS} interleaved rounds)",
        "",
        *_common.rates_table(rates, "µs"),
        "",
        f"Ratio tenure sqlite / filelock: **{ours / theirs:.2f}x** the throughput. tenure's "
        "SQLite acquire is one upsert statement (its own write transaction; under contention "
        "a `BEGIN IMMEDIATE` transaction that also queues the caller) and its release an "
        "`UPDATE`, in a WAL database (`synchronous=normal`), so it pays a write transaction "
        "per step where filelock pays "
        "an `open` + `flock`; in exchange it records the holder, a lease that expires, and a "
        f"fencing token. memory:// ({rates[memory.label][0]:,.0f} cycles/s) is the cost of the "
        "lock logic alone. The raw row runs tenure's own acquire and release statements as "
        "plain sqlite3 calls: tenure sqlite reaches "
        f"**{ours / rates[raw.label][0]:.2f}x** that floor.",
        "",
        "The same cycles by CPU time (user + system of this process, best of "
        f"{ROUNDS} interleaved rounds of 3,000): the work one cycle costs, which other "
        "tenants of a shared machine do not inflate the way they inflate throughput "
        "(waits for the disk or the CPU are not in it).",
        "",
        *_common.table(["lock", "CPU µs per cycle"],
                       [[label, f"{micros:.1f}"] for label, micros in cpu.items()]),
        "",
        f"By CPU time, tenure sqlite costs **{cpu[raw.label] / cpu[sqlite.label]:.2f}x** "
        "the floor's throughput-equivalent (floor CPU / tenure CPU) and "
        f"**{cpu[file_lock.label] / cpu[sqlite.label]:.2f}x** filelock's.",
        "",
        f"## Handoff latency (2 processes taking turns, {args.handoffs} handoffs per lock)",
        "",
        "From the holder's `time.monotonic_ns()` just before release to the waiter's acquire "
        f"returning. The holder releases {_common.HOLD_RANGE[0] * 1000:g}.."
        f"{_common.HOLD_RANGE[1] * 1000:g} ms "
        "(uniform) after the waiter entered acquire, so releases land anywhere in the waiter's "
        "poll cycle. Defaults on both sides: filelock polls every 0.05 s; tenure's SQLite "
        "waiters are queued and woken by the release (one datagram to the head waiter's "
        "process; see docs/backends/sqlite.md), their 0.125..0.25 s pauses only refresh "
        "their place.",
        "",
        *_common.handoff_table(handoffs),
        "",
        "Ratios tenure sqlite / filelock (defaults; lower is better): p50 "
        f"**{ms(handoffs[sqlite.label], 0.5) / ms(handoffs[file_lock.label], 0.5):.2f}**, p99 "
        f"**{ms(handoffs[sqlite.label], 0.99) / ms(handoffs[file_lock.label], 0.99):.2f}**. "
        f"The `{fast_file_lock.label}` row is for reference only: polling faster shortens "
        "filelock's handoff at the cost of more wake-ups while waiting. With a few hundred "
        "handoffs, p99 is the 2nd-3rd worst sample: read it as an order of magnitude.",
        "",
        f"## Contention ({args.processes} processes looping acquire + release on one lock, "
        f"{args.contention_seconds:g} s)",
        "",
        "Cross-process share: acquisitions that followed another process's release (the rest "
        "are the releaser taking the lock straight back: with tenure's fair queue, only when "
        "no other process was queued at that moment, e.g. all of them preempted between "
        "their release and their next try). Handoff: that release's "
        "`time.monotonic_ns()` stamp to the next holder's acquire returning. Longest wait: "
        "the longest time any process spent inside one acquire. Spread: fewest..most "
        "acquisitions of one process.",
        "",
        "| lock | acquisitions | cross-process share | cross-process handoffs | "
        "handoff p50 ms | longest wait ms | per-process spread |",
        "|---|--:|--:|--:|--:|--:|--:|",
        *(contention_line(label, result) for label, result in contended.items()),
        "",
        f"## Idle waiter CPU (one process blocked {args.idle_seconds:g} s behind a holder)",
        "",
        "User + system CPU time of the waiting process over wall time, as a share of one "
        "core: the price of waiting by polling (tenure: a place refresh every 0.125..0.25 s; "
        "os.times() counts in 10 ms ticks, so over "
        f"{args.idle_seconds:g} s one tick is {1 / args.idle_seconds:.2f}% of a core).",
        "",
        *_common.table(["lock", "share of a core"],
                       [[label, f"{100 * share:.2f}%"] for label, share in idle.items()]),
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
