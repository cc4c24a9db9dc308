"""``tenure demo``: many processes sell from one stock record, without and with the lock.

Each sale is the classic check-then-act: read the stock, think (the payment, say), write the
stock minus one; then the worker ships the order (as long again, outside any lock). Without a
lock, sales that overlap read the same stock and overwrite each other's writes: more units are
sold than there were. With ``locks.lock("demo:stock")`` around each sale they are serialised
and exactly the stock is sold. The record also plays the protected resource's part in fencing:
it keeps the fence of the last write and refuses a write whose fence is not greater (none
should be refused; a paused holder's late write would be).

The workers are separate processes (multiprocessing, 'spawn' context), so the lock is the
cross-process one the backend provides; ``memory://`` is refused for that reason.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import queue
import signal
import statistics
import tempfile
import threading
import time
from multiprocessing.context import SpawnContext
from multiprocessing.sharedctypes import Synchronized
from multiprocessing.synchronize import Barrier
from typing import Any, TextIO

import tenure
from tenure._urls import redact, resolve_url, scheme_of
from tenure.cli import EXIT_NOTHING, EXIT_OK, CommandError

__all__ = ["LOCK_NAME", "DemoOptions", "run_demo"]

LOCK_NAME = "demo:stock"
LOCK_TTL = 10.0
LOCK_TIMEOUT = 60.0
"""A locked worker that waits this long for one sale gives up and reports an error."""
STARTUP_TIMEOUT = 60.0
PHASE_TIMEOUT = 300.0


@dataclasses.dataclass(frozen=True)
class DemoOptions:
    url: str | None
    workers: int
    stock: int
    think: float
    """Seconds between reading the stock and writing it back."""


@dataclasses.dataclass(frozen=True)
class _Task:
    url: str
    locked: bool
    record: str
    think: float


@dataclasses.dataclass
class _Phase:
    label: str
    sold: int = 0
    final_stock: int = 0
    elapsed: float = 0.0
    fences: list[int] = dataclasses.field(default_factory=list)
    waits: list[float] = dataclasses.field(default_factory=list)
    holds: list[float] = dataclasses.field(default_factory=list)
    refused: int = 0
    per_worker: list[int] = dataclasses.field(default_factory=list)
    errors: list[str] = dataclasses.field(default_factory=list)


def run_demo(options: DemoOptions, out: TextIO) -> int:
    """Run both phases and print them side by side; 0 if the locked phase was exact."""
    url = resolve_url(options.url)
    if scheme_of(url) == "memory":
        raise CommandError(
            "the demo's workers are separate processes and memory:// is private to each "
            "process: use sqlite:///path.db or a server URL"
        )
    # A bad URL or a dead server fails here, before any worker: connecting sends nothing,
    # so one real call (a look at the demo's lock) makes the server answer or the
    # BackendError name it. Without it, every worker failed alone and the demo ended in
    # "NOT exact (0 sold of 100)".
    with tenure.connect(url) as locks:
        fair = locks.capabilities.wakeups.startswith("queued")
        locks.inspect(LOCK_NAME)
    out.write(
        f"tenure demo: {options.workers} worker processes sell {options.stock} units; each "
        f"sale reads the stock, thinks {options.think * 1000:g} ms, writes stock - 1, then "
        f"ships the order ({options.think * 1000:g} ms)\n"
        f"backend: {redact(url)} (lock {LOCK_NAME!r})\n\n"
    )
    out.flush()
    context = _spawn_context()
    with tempfile.TemporaryDirectory(prefix="tenure-demo-") as directory:
        record = str(pathlib.Path(directory) / "stock.json")
        unlocked = _run_phase(
            context, _Task(url, False, record, options.think), "without lock", options, out
        )
        locked = _run_phase(
            context, _Task(url, True, record, options.think), "with lock", options, out
        )
    exact = (
        locked.sold == options.stock and locked.final_stock == 0 and locked.refused == 0
        and not locked.errors
    )
    _report(unlocked, locked, options, exact, out, fair=fair)
    return EXIT_OK if exact else EXIT_NOTHING


def _spawn_context() -> SpawnContext:
    import multiprocessing

    return multiprocessing.get_context("spawn")


def _run_phase(
    context: SpawnContext,
    task: _Task,
    label: str,
    options: DemoOptions,
    out: TextIO,
) -> _Phase:
    record = pathlib.Path(task.record)
    _write_record(record, {"stock": options.stock, "fence": 0})
    sold = context.Value("i", 0)
    barrier = context.Barrier(options.workers + 1)
    results: Any = context.Queue()
    workers = [
        context.Process(target=_worker, args=(task, barrier, sold, results), daemon=True)
        for _ in range(options.workers)
    ]
    for worker in workers:
        worker.start()
    phase = _Phase(label)
    reports: list[dict[str, Any]] = []
    try:
        try:
            barrier.wait(STARTUP_TIMEOUT)
        except threading.BrokenBarrierError:
            raise CommandError(f"demo workers did not start ({label})", EXIT_NOTHING) from None
        started = time.monotonic()
        progress = _Progress(out, label, options.stock, started)
        while len(reports) < len(workers):
            try:
                reports.append(results.get(timeout=0.1))
            except queue.Empty:
                if time.monotonic() - started > PHASE_TIMEOUT:
                    phase.errors.append(f"gave up after {PHASE_TIMEOUT:g} s")
                    break
                if not any(worker.is_alive() for worker in workers) and results.empty():
                    phase.errors.append("a worker process died without reporting")
                    break
            progress.show(sold.value, _read_record(record)["stock"])
        finished = max((report["finished"] for report in reports), default=time.monotonic())
        phase.elapsed = finished - started
        progress.done(sold.value, _read_record(record)["stock"], phase.elapsed)
    except BaseException:
        for worker in workers:  # Ctrl-C (the workers ignore it) or a failure: stop them now
            worker.terminate()
        raise
    finally:
        for worker in workers:
            worker.join(timeout=5)
            if worker.is_alive():
                worker.terminate()
                worker.join()
    phase.final_stock = _read_record(record)["stock"]
    for report in reports:
        phase.sold += report["sold"]
        phase.per_worker.append(report["sold"])
        phase.fences += report["fences"]
        phase.waits += report["waits"]
        phase.holds += report["holds"]
        phase.refused += report["refused"]
        if report["error"]:
            phase.errors.append(report["error"])
    return phase


def _worker(task: _Task, barrier: Barrier, sold: Synchronized[int], results: Any) -> None:
    # Ctrl-C reaches the whole process group; the parent decides, the workers carry on.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    report: dict[str, Any] = {
        "sold": 0, "fences": [], "waits": [], "holds": [], "refused": 0, "error": None,
    }
    try:
        record = pathlib.Path(task.record)
        if task.locked:
            with tenure.connect(task.url) as locks:
                barrier.wait(STARTUP_TIMEOUT)
                _sell_locked(locks, record, task.think, sold, report)
        else:
            barrier.wait(STARTUP_TIMEOUT)
            _sell_unlocked(record, task.think, sold, report)
    except Exception as exc:
        report["error"] = f"worker {os.getpid()}: {type(exc).__name__}: {exc}"
    finally:
        report["finished"] = time.monotonic()  # CLOCK_MONOTONIC: one clock for the host
        results.put(report)


def _sell_unlocked(
    record: pathlib.Path, think: float, sold: Synchronized[int], report: dict[str, Any]
) -> None:
    while True:
        current = _read_record(record)
        if current["stock"] <= 0:
            return
        time.sleep(think)
        _write_record(record, {"stock": current["stock"] - 1, "fence": current["fence"]})
        report["sold"] += 1
        with sold.get_lock():
            sold.value += 1
        time.sleep(think)  # shipping the order: outside the critical section in both phases


def _sell_locked(
    locks: tenure.Locks,
    record: pathlib.Path,
    think: float,
    sold: Synchronized[int],
    report: dict[str, Any],
) -> None:
    lock = locks.lock(LOCK_NAME, ttl=LOCK_TTL, timeout=LOCK_TIMEOUT)
    while True:
        asked = time.monotonic()
        if not lock.acquire():
            raise tenure.LockTimeout(LOCK_NAME, LOCK_TIMEOUT)
        got = time.monotonic()
        fence = lock.fence
        assert fence is not None
        report["waits"].append(got - asked)
        report["fences"].append(fence)
        try:
            current = _read_record(record)
            if current["stock"] <= 0:
                return
            time.sleep(think)
            if fence <= current["fence"]:
                # The resource's fence check: a write from an older acquisition is refused.
                report["refused"] += 1
                continue
            _write_record(record, {"stock": current["stock"] - 1, "fence": fence})
            report["sold"] += 1
            with sold.get_lock():
                sold.value += 1
        finally:
            report["holds"].append(time.monotonic() - got)
            lock.release()
        time.sleep(think)  # shipping the order, after the release: the others get a turn


def _read_record(record: pathlib.Path) -> dict[str, int]:
    data: dict[str, int] = json.loads(record.read_text())
    return data


def _write_record(record: pathlib.Path, data: dict[str, int]) -> None:
    # Write then rename: a reader always sees a whole record, never a torn one. The race the
    # demo shows is between sales, not inside one write.
    scratch = record.with_name(f"{record.name}.{os.getpid()}.tmp")
    scratch.write_text(json.dumps(data))
    os.replace(scratch, record)


class _Progress:
    """A live counter on a terminal; a line per second otherwise (logs, CI)."""

    def __init__(self, out: TextIO, label: str, stock: int, started: float) -> None:
        self.out = out
        self.label = label
        self.stock = stock
        self.started = started
        self.live = out.isatty()
        self.next_line = started + 1.0

    def _text(self, sold: int, stock_left: int, elapsed: float) -> str:
        return f"[{self.label}] {elapsed:5.1f} s: {sold} sold, stock record says {stock_left}"

    def show(self, sold: int, stock_left: int) -> None:
        now = time.monotonic()
        if self.live:
            self.out.write("\r" + self._text(sold, stock_left, now - self.started) + "\033[K")
            self.out.flush()
        elif now >= self.next_line:
            self.out.write(self._text(sold, stock_left, now - self.started) + "\n")
            self.out.flush()
            self.next_line += 1.0

    def done(self, sold: int, stock_left: int, elapsed: float) -> None:
        prefix = "\r" if self.live else ""
        suffix = "\033[K" if self.live else ""
        self.out.write(f"{prefix}{self._text(sold, stock_left, elapsed)}, done{suffix}\n")
        self.out.flush()


def _report(
    unlocked: _Phase, locked: _Phase, options: DemoOptions, exact: bool, out: TextIO, *,
    fair: bool,
) -> None:
    stock = options.stock

    def column(phase: _Phase) -> list[str]:
        deducted = stock - phase.final_stock
        return [
            str(phase.sold),
            str(phase.final_stock),
            str(max(phase.sold - stock, 0)),
            str(phase.sold - deducted),
            f"{phase.elapsed:.2f} s",
        ]

    labels = ["units sold", "final stock", "oversold by", "lost updates", "elapsed"]
    rows = [["", "without lock", "with lock"]] + [
        [label, a, b] for label, a, b in zip(labels, column(unlocked), column(locked), strict=True)
    ]
    out.write("\n")
    for label, a, b in rows:
        out.write(f"  {label:<14}{a:>14}{b:>12}\n")
    out.write("\n")
    fences = locked.fences
    if fences:
        distinct = len(set(fences)) == len(fences)
        out.write(
            f"with lock: fences {min(fences)}..{max(fences)} over {len(fences)} acquisitions, "
            f"{'all distinct' if distinct else 'DUPLICATES'}; each write's fence above the "
            f"last: {'yes' if locked.refused == 0 else f'no, {locked.refused} refused'}\n"
        )
    if locked.waits:
        out.write(
            f"with lock: waited for the lock p50 {_ms(statistics.median(locked.waits))}, "
            f"p99 {_ms(_percentile(locked.waits, 0.99))}; held p50 "
            f"{_ms(statistics.median(locked.holds))}; sales per worker "
            f"{min(locked.per_worker)}..{max(locked.per_worker)} "
            + ("(fair: waiters are served in arrival order, a worker that releases queues "
               "behind them)\n" if fair else
               "(the lock is not fair: a worker that releases may take it straight back)\n")
        )
    for phase in (unlocked, locked):
        for error in phase.errors:
            out.write(f"[{phase.label}] error: {error}\n")
    if exact:
        out.write(
            f"result: without the lock {unlocked.sold} units were sold from a stock of {stock}; "
            f"with it, exactly {locked.sold}.\n"
        )
    else:
        out.write(
            f"result: the locked run was NOT exact ({locked.sold} sold of {stock}, final "
            f"stock {locked.final_stock})\n"
        )


def _percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms"
