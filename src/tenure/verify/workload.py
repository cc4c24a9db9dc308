"""The client side of ``tenure verify``: processes that call a lease store at random and
record every call (``Operation``) for the checker.

Each client (``tenure.verify.client``, which says what it calls) loops until the run's end.
Clients are processes (forked, or spawned where another thread runs), each with its own
connection; for a store that lives in one process (``memory://`` and its subclasses) they
are threads of this process instead.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import multiprocessing
import pathlib
import queue
import secrets
import tempfile
import threading
import time
from typing import Any

import tenure
from tenure.verify.client import Client
from tenure.verify.history import Operation
from tenure.verify.jsonl import dump_lines, load

__all__ = ["ClientFailed", "WorkloadOptions", "describe_run", "run_workload"]

FINISH_GRACE = 30.0
"""Seconds past the run's end a client may take to finish its last call (a blocked call
on an unreachable server) before the run is given up."""


@dataclasses.dataclass(frozen=True, slots=True)
class WorkloadOptions:
    url: str | None
    clients: int = 4
    seconds: float = 10.0
    names: int = 2
    ttl: float = 1.0
    prefix: str = ""
    """The names used are ``prefix + "0"`` ... (default: ``verify:<random>:``)."""
    seed: int | None = None
    semaphore: int | None = None
    """Use semaphores of this many permits instead of locks."""
    rwlock: bool = False
    """Use read-write locks (and fair locks, their write side) instead of locks."""
    election: bool = False
    """Use elections (campaign, leader, resign) instead of locks."""

    def __post_init__(self) -> None:
        if (self.semaphore is not None) + self.rwlock + self.election > 1:
            raise tenure.InvalidArgument("a run uses one primitive: semaphore, rwlock or "
                                         "election, not two")

    @property
    def primitive(self) -> str:
        """The run's primitive, as ``Operation.primitive`` names it."""
        if self.semaphore is not None:
            return "semaphore"
        return "rwlock" if self.rwlock else "election" if self.election else "lock"


class ClientFailed(tenure.TenureError):
    """A client of the workload could not run (it could not connect, or never finished)."""


def run_workload(options: WorkloadOptions) -> list[Operation]:
    """Run the clients and return every call they made (times from the run's start).
    Raises ClientFailed if a client could not run to the end."""
    prefix = options.prefix or f"verify:{secrets.token_hex(4)}:"
    seed = options.seed if options.seed is not None else secrets.randbits(32)
    in_process = _in_process(options.url)
    context: Any = threading if in_process else multiprocessing.get_context(_start_method())
    # Clients connect, say they are ready, and start together: spawned processes take a
    # while to import and connect, which must not eat into the run.
    ready = queue.SimpleQueue() if in_process else context.SimpleQueue()
    go = context.Event()
    start = _Start() if in_process else context.Value("d", 0.0)
    # And they close their connections only once every client is done: closing ends a
    # ZooKeeper session, which frees its nodes, and a lease ending so, unrecorded, while
    # another client still calls would read as a lease lost early.
    done = queue.SimpleQueue() if in_process else context.SimpleQueue()
    finish = context.Event()
    signals = (ready, go, start, done, finish)
    with tempfile.TemporaryDirectory(prefix="tenure-verify-") as directory:
        outputs = [pathlib.Path(directory, f"client-{client}.jsonl")
                   for client in range(options.clients)]
        runners: list[Any] = [
            (threading.Thread if in_process else context.Process)(
                target=_client_main,
                args=((options, prefix, seed + client, client), str(out), signals),
                daemon=True)
            for client, out in enumerate(outputs)]
        for runner in runners:
            runner.start()
        for _ in runners:
            ready.get()
        start.value = time.monotonic()
        go.set()
        give_up = start.value + options.seconds + FINISH_GRACE
        finished = 0
        with contextlib.suppress(TimeoutError):
            while finished < len(runners):
                _get(done, give_up - time.monotonic())
                finished += 1
        finish.set()
        for runner in runners:
            runner.join(max(0.0, give_up - time.monotonic()))
        hung = [number for number, runner in enumerate(runners) if runner.is_alive()]
        for number in hung:
            if not in_process:
                runners[number].kill()
        if hung:
            raise ClientFailed(f"client(s) {hung} did not finish within {FINISH_GRACE:g} s "
                               "of the run's end (a call hung): no verdict")
        history: list[Operation] = []
        for number, out in enumerate(outputs):
            failure = out.with_suffix(".error")
            if failure.exists():
                raise ClientFailed(f"client {number}: {failure.read_text().strip()}")
            if not out.exists():
                raise ClientFailed(f"client {number} ended without a history")
            history.extend(load(out)[0])
    _clean_up(options, prefix)
    origin = min((op.invoked for op in history), default=0.0)
    return [dataclasses.replace(
        op, invoked=op.invoked - origin,
        completed=None if op.completed is None else op.completed - origin) for op in history]


_Job = tuple[WorkloadOptions, str, int, int]
"""What one client runs: the options, the name prefix, its seed, its number."""


def _start_method() -> str:
    """``fork`` where it is safe (this process runs no other thread: a fork copies no lock
    held by one), as it starts clients in milliseconds; else ``spawn``."""
    if "fork" in multiprocessing.get_all_start_methods() and threading.active_count() == 1:
        return "fork"
    return "spawn"


class _Start:
    value = 0.0


def _in_process(url: str | None) -> bool:
    """Whether the store lives in this process (memory:// and subclasses)."""
    from tenure._urls import load_backend_module, resolve_url
    from tenure.backends.memory._sync import MemoryBackend

    backend = load_backend_module(resolve_url(url), "_sync").BACKEND
    return isinstance(backend, type) and issubclass(backend, MemoryBackend)


def _clean_up(options: WorkloadOptions, prefix: str) -> None:
    """Break what the run left held, so its names do not sit out their ttl."""
    # An election is a lock with a value.
    kind = "lock" if options.election else options.primitive
    try:
        with tenure.connect(options.url) as locks:
            for number in range(options.names):
                locks.break_lock(f"{prefix}{number}", kind)
    except tenure.TenureError:
        pass  # the leases run out on their own within the ttl


def _get(source: Any, timeout: float) -> Any:
    """The next item of a queue.SimpleQueue or a multiprocessing SimpleQueue, waiting at most
    ``timeout`` seconds (TimeoutError)."""
    deadline = time.monotonic() + max(0.0, timeout)
    while True:
        if isinstance(source, queue.SimpleQueue):
            try:
                return source.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise TimeoutError from None
        if not source.empty():
            return source.get()
        if time.monotonic() >= deadline:
            raise TimeoutError
        time.sleep(0.01)


def _client_main(job: _Job, out: str, signals: tuple[Any, ...]) -> None:
    """One client, in its own process or thread: connect, say ready, wait for the start,
    run, and write the history to ``out`` (or what went wrong next to it)."""
    options, prefix, seed, client = job
    if multiprocessing.parent_process() is not None:
        # Leases this run loses on purpose are not news: keep the client's stderr quiet.
        logging.getLogger("tenure").setLevel(logging.ERROR)
    try:
        history = Client(options, prefix, seed, client, FINISH_GRACE).run(signals)
    except BaseException as exc:  # reported by the parent, which owns the exit status
        pathlib.Path(out).with_suffix(".error").write_text(f"{type(exc).__name__}: {exc}")
        return
    pathlib.Path(out).write_text(dump_lines(history))


def describe_run(options: WorkloadOptions) -> dict[str, Any]:
    """What a saved history's header says about the run (never the URL's password)."""
    from tenure._urls import redact, resolve_url

    return {"url": redact(resolve_url(options.url)), "clients": options.clients,
            "seconds": options.seconds, "names": options.names, "ttl": options.ttl,
            "primitive": options.primitive, "semaphore": options.semaphore,
            "started": time.time()}
