"""What the benchmark scripts in bench/ share: the machine description, the timed uncontended
loop, the cross-process handoff measurement, percentiles and markdown tables.

The scripts run as ``.venv/bin/python bench/<x>.py``, which puts bench/ on ``sys.path``, so they
``import _common``; the spawned processes of a handoff inherit that path. Figures only: nothing
here asserts anything about the locks it measures.
"""

from __future__ import annotations

import contextlib
import datetime
import importlib.metadata
import os
import pathlib
import platform
import random
import statistics
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from multiprocessing.context import SpawnContext
from typing import Any, Protocol

HOLD_RANGE = (0.005, 0.055)
"""Seconds a handoff's holder keeps the lock once the other process waits (uniform): the
release lands anywhere in a poller's cycle."""

Pair = tuple[Callable[[], Any], Callable[[], Any]]
"""A lock's (acquire, release)."""

LockFactory = Callable[[], tuple[Pair, Callable[[], None]]]
"""Opens a lock: its (acquire, release) and a clean-up. Picklable (a module-level function or a
``functools.partial`` of one) when it goes to a handoff's spawned processes."""


# ---- figures ----------------------------------------------------------------------------------


def percentile(values: list[int], fraction: float) -> float:
    """The sample at ``fraction`` of the sorted ``values`` (nearest rank, no interpolation)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def ms(values: list[int], fraction: float) -> float:
    """``percentile`` of nanosecond ``values``, in milliseconds."""
    return percentile(values, fraction) / 1e6


# ---- the machine ------------------------------------------------------------------------------


def utc_date() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")


def cpu_model(default: str = "unknown") -> str:
    """The first ``model name`` of /proc/cpuinfo, or ``default``."""
    with contextlib.suppress(OSError):
        for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return default


def os_name() -> str:
    return f"{platform.system()} {platform.release()}"


def version(package: str, missing: str = "-") -> str:
    """The installed version of ``package``, or ``missing``."""
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return missing


def machine(*, cpu_default: str = "unknown", load_average: bool = False) -> dict[str, str]:
    """Date, CPU, core count (and, with ``load_average``, the load averages now), OS, Python:
    the head of a report's facts table; the caller adds its servers and libraries."""
    facts = {"date": utc_date(), "cpu": cpu_model(cpu_default), "nproc": str(os.cpu_count())}
    if load_average:
        facts["load average at start"] = " ".join(f"{value:.2f}" for value in os.getloadavg())
    facts["os"] = os_name()
    facts["python"] = platform.python_version()
    return facts


def print_facts(facts: Mapping[str, str]) -> None:
    print("  ".join(f"{key}: {value}" for key, value in facts.items()), flush=True)


# ---- uncontended ------------------------------------------------------------------------------


def timed_loop(
    acquire: Callable[[], object],
    release: Callable[[], object],
    seconds: float,
    *,
    warmup: int,
    batch: int,
) -> tuple[float, int]:
    """(cycles per second, cycles) of acquire + release in a loop for ``seconds``, after
    ``warmup`` untimed cycles; the clock is read once per ``batch`` cycles."""
    for _ in range(warmup):
        acquire()
        release()
    cycles = 0
    started = time.perf_counter()
    deadline = started + seconds
    while True:
        for _ in range(batch):
            acquire()
            release()
        cycles += batch
        now = time.perf_counter()
        if now >= deadline:
            return cycles / (now - started), cycles


class AsyncLock(Protocol):
    def acquire(self) -> Awaitable[object]: ...

    def release(self) -> Awaitable[object]: ...


async def async_timed_loop(
    lock: AsyncLock, seconds: float, *, warmup: int, batch: int
) -> tuple[float, int]:
    """``timed_loop`` for a lock whose acquire and release are coroutines."""
    for _ in range(warmup):
        await lock.acquire()
        await lock.release()
    cycles = 0
    started = time.perf_counter()
    deadline = started + seconds
    while True:
        for _ in range(batch):
            await lock.acquire()
            await lock.release()
        cycles += batch
        now = time.perf_counter()
        if now >= deadline:
            return cycles / (now - started), cycles


def uncontended(
    factory: LockFactory, seconds: float, *, warmup: int, batch: int
) -> tuple[float, int]:
    """``timed_loop`` on a lock opened by ``factory``, closed afterwards."""
    (acquire, release), close = factory()
    try:
        return timed_loop(acquire, release, seconds, warmup=warmup, batch=batch)
    finally:
        close()


def best_of_rounds(
    runs: Mapping[str, Callable[[], tuple[float, int]]],
    rounds: int,
    before: Callable[[], object] | None = None,
) -> dict[str, tuple[float, int]]:
    """label -> (best cycles/s, total cycles) over ``rounds`` rounds of every run in turn.

    Interleaved rounds, best of each: other tenants of a shared machine slow some rounds
    down, never speed one up. ``before`` runs before each measurement.
    """
    rates: dict[str, tuple[float, int]] = {}
    for _ in range(rounds):
        for label, run in runs.items():
            if before is not None:
                before()
            rate, cycles = run()
            best, total = rates.get(label, (0.0, 0))
            rates[label] = (max(best, rate), total + cycles)
    return rates


# ---- handoff ----------------------------------------------------------------------------------


def pingpong(
    factory: LockFactory,
    index: int,
    processes: int,
    rounds: int,
    shared: dict[str, Any],
    barrier: Any,
    results: Any,
) -> None:
    """One of the processes taking turns; puts its handoff latencies (ns) on ``results``.

    The holder waits until every other process is blocked in acquire, holds ``HOLD_RANGE``
    longer, stamps ``time.monotonic_ns()`` (one clock for the host) just before release; the
    waiter stamps when its acquire returns. The releaser never barges back in: it waits until
    another process took the lock.
    """
    (acquire, release), close = factory()
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


def handoff(
    context: SpawnContext,
    factory: LockFactory,
    rounds: int,
    processes: int = 2,
    timeout: float = 300,
) -> list[int]:
    """Handoff latencies (ns) of ``processes`` processes taking ``rounds`` turns on the lock
    ``factory`` opens in each; ``timeout``: seconds to wait for each process's figures."""
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
            target=pingpong, args=(factory, index, processes, rounds, shared, barrier, results)
        )
        for index in range(processes)
    ]
    for worker in workers:
        worker.start()
    latencies: list[int] = []
    for _ in workers:
        latencies += results.get(timeout=timeout)
    for worker in workers:
        worker.join(timeout=30)
    return latencies


def handoffs(
    context: SpawnContext,
    factories: Mapping[str, LockFactory],
    count: int,
    *,
    width: int,
    timeout: float = 300,
    before: Callable[[], object] | None = None,
) -> dict[str, list[int]]:
    """label -> ``count`` handoff latencies (ns) between 2 processes, one lock after the other,
    each printed as it is done (labels padded to ``width``). ``before`` runs before each."""
    latencies: dict[str, list[int]] = {}
    for label, factory in factories.items():
        if before is not None:
            before()
        started = time.perf_counter()
        # One more turn than handoffs: the first acquisition follows no release.
        values = handoff(context, factory, count + 1, timeout=timeout)
        latencies[label] = values
        print(f"handoff     {label:<{width}} p50 {ms(values, 0.5):7.2f} ms  "
              f"p99 {ms(values, 0.99):7.2f} ms  ({len(values)} handoffs, "
              f"{time.perf_counter() - started:.1f} s)", flush=True)
    return latencies


# ---- markdown ---------------------------------------------------------------------------------


def _row(cells: Iterable[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def table(header: Sequence[str], rows: Iterable[Sequence[str]], *, left: int = 1) -> list[str]:
    """A markdown table: the first ``left`` columns aligned left, the others right."""
    return [
        _row(header),
        "|" + "".join("---|" if column < left else "---:|" for column in range(len(header))),
        *(_row(row) for row in rows),
    ]


def facts_table(facts: Mapping[str, str]) -> list[str]:
    """The two-column table of a report's facts, without a header."""
    return ["| | |", "|---|---|", *(_row((key, value)) for key, value in facts.items())]


PER_CYCLE = {"µs": (1e6, ",.1f"), "ms": (1e3, ",.2f")}


def rates_table(rates: Mapping[str, tuple[float, int]], unit: str = "µs") -> list[str]:
    """lock | cycles/s | time per cycle (in ``unit``: "µs" or "ms")."""
    scale, spec = PER_CYCLE[unit]
    return table(
        ["lock", "cycles/s", f"{unit} per cycle"],
        [[label, f"{rate:,.0f}", format(scale / rate, spec)] for label, (rate, _) in rates.items()],
    )


def handoff_table(latencies: Mapping[str, list[int]]) -> list[str]:
    """lock | p50 | p99 | mean (ms) | handoffs, of nanosecond latencies."""
    return table(
        ["lock", "p50 ms", "p99 ms", "mean ms", "handoffs"],
        [
            [label, f"{ms(values, 0.5):.2f}", f"{ms(values, 0.99):.2f}",
             f"{statistics.fmean(values) / 1e6:.2f}", str(len(values))]
            for label, values in latencies.items()
        ],
    )


def publish(report: str, path: pathlib.Path, root: pathlib.Path, write: bool) -> None:
    """Write ``report`` to ``path`` (unless not ``write``), then print it: written first, so
    that ``| head`` cannot lose the file."""
    if write:
        path.parent.mkdir(exist_ok=True)
        path.write_text(report)
    print()
    print(report)
    if write:
        print(f"wrote {path.relative_to(root)}")
