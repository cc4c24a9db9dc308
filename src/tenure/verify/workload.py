"""The client side of ``tenure verify``: processes that call a lease store at random and
record every call (``Operation``) for the checker.

Each client loops until the run's end: when it holds nothing it acquires one of the names
(non-blocking, or waiting a fraction of the ttl), or asks ``locked()`` / ``inspect()``; when
it holds a lease it extends it, releases it, asks ``owned()``, lets it run out (it stops
using it), or pauses past its ttl before the next call, so that expiry, refusals and "not
ours" answers all happen. Handles never renew on their own (``renew=False``): every call the
store sees is a recorded one. A lease whose handle already knows it lost (``lock.lost``) is
left alone, since the handle would answer without asking the store. An error or timeout is
recorded as an unknown outcome, and the client gives that lease up.

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
import random
import secrets
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any

import tenure
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
    kind = "lock" if options.semaphore is None else "semaphore"
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
        history = _Client(options, prefix, seed, client).run(signals)
    except BaseException as exc:  # reported by the parent, which owns the exit status
        pathlib.Path(out).with_suffix(".error").write_text(f"{type(exc).__name__}: {exc}")
        return
    pathlib.Path(out).write_text(dump_lines(history))


@dataclasses.dataclass
class _Held:
    name: str
    lease: str
    lock: tenure.Lock | tenure.Semaphore


class _Client:
    def __init__(self, options: WorkloadOptions, prefix: str, seed: int, client: int) -> None:
        self.options = options
        self.names = [f"{prefix}{number}" for number in range(options.names)]
        self.random = random.Random(seed)
        self.client = client
        self.acquired = 0
        self.history: list[Operation] = []
        self.held: _Held | None = None
        # Handles given up, kept referenced: nothing of theirs runs, nothing is collected.
        self.abandoned: list[tenure.Lock | tenure.Semaphore] = []

    def run(self, signals: tuple[Any, ...]) -> list[Operation]:
        ready, go, start, done, finish = signals
        looped = False
        try:
            try:
                locks = tenure.connect(self.options.url)
                # A first call, so that connecting is not part of the run.
                locks.inspect(self.names[0])
            finally:
                ready.put(self.client)
            with locks:
                self.locks = locks
                go.wait()
                looped = True
                try:
                    self._loop(start.value + self.options.seconds)
                finally:
                    done.put(self.client)
                finish.wait(FINISH_GRACE + self.options.seconds)
        except BaseException:
            if not looped:
                done.put(self.client)  # failed before the run: the parent must not wait
            raise
        return self.history

    def _loop(self, end: float) -> None:
        ttl = self.options.ttl
        while time.monotonic() < end:
            if self.held is not None and self.held.lock.lost.is_set():
                self._give_up()
            if self.held is None:
                self._free_step()
            else:
                self._held_step()
            # Mostly short pauses; now and then one past the ttl, so leases expire under
            # their holders.
            pause = ttl * (1.1 if self.random.random() < 0.01 else self.random.uniform(0, 0.05))
            time.sleep(min(pause, max(0.0, end - time.monotonic())))

    def _give_up(self) -> None:
        assert self.held is not None
        self.abandoned.append(self.held.lock)
        self.held = None

    def _free_step(self) -> None:
        name = self.random.choice(self.names)
        ttl = self.options.ttl
        choice = self.random.random()
        if choice < 0.6:
            self.acquired += 1
            lease = f"{self.client}.{self.acquired}"
            lock = self._handle(name)
            if self.random.random() < 0.5:
                call: Callable[[], Any] = lambda: lock.acquire(blocking=False)  # noqa: E731
            else:
                wait = self.random.uniform(0.0, ttl / 5)
                call = lambda: lock.acquire(timeout=wait)  # noqa: E731
            answer, op = self._call(call, name=name, kind="acquire", lease=lease, ttl=ttl)
            if answer:
                self.history.append(dataclasses.replace(op, outcome="ok", fence=lock.fence))
                self.held = _Held(name, lease, lock)
            elif op.outcome == "unknown":
                self.history.append(op)
                self.abandoned.append(lock)
            else:
                self.history.append(dataclasses.replace(op, outcome="fail"))
        elif choice < 0.8:
            answer, op = self._call(lambda: self._handle(name).locked(),
                                    name=name, kind="locked")
            self.history.append(op if op.outcome == "unknown" else
                                dataclasses.replace(op, held=bool(answer)))
        else:
            answer, op = self._call(lambda: self.locks.inspect(name, self.primitive), name=name,
                                    kind="inspect")
            if op.outcome != "unknown" and self.options.semaphore is not None:
                # A semaphore's inspect is checked as locked(): all permits taken or not.
                full = answer is not None and len(answer.leases) >= self.options.semaphore
                op = dataclasses.replace(op, held=full)
            elif op.outcome != "unknown":
                # Held or not only: the fence inspect reports is not the holder's on every
                # store (Redlock's is the largest counter of the nodes read, which refused
                # attempts also move).
                op = dataclasses.replace(op, held=answer is not None and answer.holder is not None)
            self.history.append(op)

    def _held_step(self) -> None:
        held = self.held
        assert held is not None
        choice = self.random.random()
        base = {"name": held.name, "lease": held.lease}
        if choice < 0.45:
            ttl = self.options.ttl
            answer, op = self._call(held.lock.extend, kind="extend", ttl=ttl, **base)
            self.history.append(op)
            if op.outcome != "ok":
                self._give_up()
        elif choice < 0.8:
            answer, op = self._call(held.lock.release, kind="release", **base)
            self.history.append(op)
            self.held = None
        elif choice < 0.95:
            answer, op = self._call(held.lock.owned, kind="owned", **base)
            if op.outcome != "unknown":
                op = dataclasses.replace(op, held=bool(answer))
            self.history.append(op)
            if not answer:
                self._give_up()
        else:
            self._give_up()  # let it run out

    @property
    def primitive(self) -> str:
        return "lock" if self.options.semaphore is None else "semaphore"

    def _handle(self, name: str) -> Any:
        """A new handle (a lock, or one permit of the semaphore) on ``name``."""
        if self.options.semaphore is None:
            return self.locks.lock(name, ttl=self.options.ttl)
        return self.locks.semaphore(name, limit=self.options.semaphore, ttl=self.options.ttl)

    def _call(self, call: Callable[[], Any], **fields: Any) -> tuple[Any, Operation]:
        """Make ``call`` and record it: ok, fail (LockLost / NotOwned), or unknown (any other
        error)."""
        if self.options.semaphore is not None:
            fields.update(primitive="semaphore", limit=self.options.semaphore)
        invoked = time.monotonic()
        try:
            answer = call()
        except (tenure.LockLost, tenure.NotOwned):
            return None, Operation(client=self.client, invoked=invoked,
                                   completed=time.monotonic(), outcome="fail", **fields)
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}"
            return None, Operation(client=self.client, invoked=invoked, completed=None,
                                   outcome="unknown", error=error[:200], **fields)
        return answer, Operation(client=self.client, invoked=invoked,
                                 completed=time.monotonic(), outcome="ok", **fields)


def describe_run(options: WorkloadOptions) -> dict[str, Any]:
    """What a saved history's header says about the run (never the URL's password)."""
    from tenure._urls import redact, resolve_url

    return {"url": redact(resolve_url(options.url)), "clients": options.clients,
            "seconds": options.seconds, "names": options.names, "ttl": options.ttl,
            "semaphore": options.semaphore, "started": time.time()}
