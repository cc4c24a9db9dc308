"""What a run records: one JSON line per event, appended by each worker to its own file.

Every time stamp is ``time.monotonic_ns()``. On Linux that is CLOCK_MONOTONIC, one clock for
the whole machine, so the controller and every worker process stamp on the same observer's
clock and their intervals can be compared directly.

Kinds of record:
- ``section``: one critical section, from just after ``acquire`` returned to just before
  ``release`` was called (so the interval lies inside the time the holder believed it held
  the lock): the worker, the lock name, the fence, what it read and wrote through the
  protected resource and whether the resource accepted the write, whether ``lost`` was set
  by the end, how the release went, for a read-write lock which side it held, and for a
  weighted permit its weight.
- ``access``: one read or write seen by the protected resource (``safety.resource``), in the
  order the resource serialised them.
- ``attempt``: one try of an exactly-one-winner race.
- ``event``: anything else worth a time stamp: a SIGKILL, a server restart, a proxy switch,
  a recovery, a failed call, a check's verdict.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import threading
import time
from collections.abc import Iterable, Iterator
from typing import IO, Any

__all__ = [
    "Access",
    "Attempt",
    "Event",
    "History",
    "Recorder",
    "Section",
    "now_ns",
]


def now_ns() -> int:
    """The observer's clock: system-wide monotonic nanoseconds."""
    return time.monotonic_ns()


@dataclasses.dataclass(frozen=True, slots=True)
class Section:
    worker: str
    seq: int
    """The worker's own count of its sections: (worker, seq) names a section."""
    name: str
    asked: int
    """When the successful ``acquire`` call was made (before any waiting)."""
    start: int
    end: int
    fence: int | None
    read: int | None = None
    wrote: int | None = None
    accepted: bool | None = None
    """The resource's verdict on the write (None: nothing written)."""
    lost: bool = False
    """``lock.lost`` was set, or ``check()`` raised, by the end of the section."""
    release: str = "ok"
    """"ok", "lost" (LockLost), "error" (BackendError), "none" (never released: killed)."""
    mode: str | None = None
    """The side of a read-write lock this section held, "read" or "write" (scenario 15);
    None for a mutex or a semaphore's permit, which exclude like a write."""
    released: int | None = None
    """When ``release`` returned, with "ok" or "lost" (None: it raised BackendError, was
    never called, or the worker does not record it): the end of the release call that
    ``tenure verify``'s checker reads (``safety.linearizable``)."""
    renewed: int | None = None
    """When the lease's last successful renewal before the section's end was sent (None:
    not renewed by then, or not a renewed mutex): the checker reads it as an extend."""
    weight: int | None = None
    """The units a weighted semaphore's permit took (scenario 17); None for every other
    section, which counts as one unit of a semaphore's limit."""

    @property
    def key(self) -> str:
        return f"{self.worker}:{self.seq}"

    @property
    def learned_loss(self) -> bool:
        """The holder was told, one way or another, that its lease was gone."""
        return self.lost or self.release in ("lost", "error")


@dataclasses.dataclass(frozen=True, slots=True)
class Access:
    seq: int
    """The resource's own order of operations."""
    at: int
    op: str
    """"read" or "write"."""
    section: str
    fence: int | None
    accepted: bool
    value: int
    """The value read, or the value the write asked to store."""
    fenced: bool
    """Whether the resource checked fences (``tenure.FenceGuard``) for this access."""


@dataclasses.dataclass(frozen=True, slots=True)
class Attempt:
    round: int
    worker: str
    won: bool
    fence: int | None
    error: str | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class Event:
    at: int
    what: str
    worker: str = ""
    data: dict[str, Any] = dataclasses.field(default_factory=dict)


Record = Section | Access | Attempt | Event
_KINDS: dict[str, type[Record]] = {
    "section": Section,
    "access": Access,
    "attempt": Attempt,
    "event": Event,
}
_NAMES = {kind: name for name, kind in _KINDS.items()}


def _encode(record: Record) -> str:
    body = dataclasses.asdict(record)
    body["kind"] = _NAMES[type(record)]
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False)


def _decode(line: str) -> Record:
    body = json.loads(line)
    kind = _KINDS[body.pop("kind")]
    return kind(**body)


class Recorder:
    """Appends records to one file, a line each, flushed at once: a worker may be killed at
    any moment, and every record written before that must survive it. Thread-safe."""

    def __init__(self, path: pathlib.Path) -> None:
        self.path = path
        self._file: IO[str] = path.open("a", encoding="utf-8")
        self._mutex = threading.Lock()

    def write(self, record: Record) -> None:
        line = _encode(record) + "\n"
        with self._mutex:
            self._file.write(line)
            self._file.flush()

    def event(self, what: str, worker: str = "", **data: Any) -> Event:
        record = Event(now_ns(), what, worker, data)
        self.write(record)
        return record

    def close(self) -> None:
        with self._mutex:
            self._file.close()


@dataclasses.dataclass
class History:
    """Every record of one scenario run, from all the files in its directory."""

    sections: list[Section] = dataclasses.field(default_factory=list)
    accesses: list[Access] = dataclasses.field(default_factory=list)
    attempts: list[Attempt] = dataclasses.field(default_factory=list)
    events: list[Event] = dataclasses.field(default_factory=list)

    @classmethod
    def load(cls, directory: pathlib.Path) -> History:
        history = cls()
        for path in sorted(directory.glob("*.jsonl")):
            history.extend(_read_lines(path))
        history.sections.sort(key=lambda s: (s.start, s.end))
        history.accesses.sort(key=lambda a: a.seq)
        history.events.sort(key=lambda e: e.at)
        return history

    def extend(self, records: Iterable[Record]) -> None:
        for record in records:
            if isinstance(record, Section):
                self.sections.append(record)
            elif isinstance(record, Access):
                self.accesses.append(record)
            elif isinstance(record, Attempt):
                self.attempts.append(record)
            else:
                self.events.append(record)

    def events_named(self, what: str) -> list[Event]:
        return [event for event in self.events if event.what == what]


def _read_lines(path: pathlib.Path) -> Iterator[Record]:
    with path.open(encoding="utf-8") as file:
        for line in file:
            # A worker killed mid-write leaves at most one torn last line: skip it.
            if line.endswith("\n"):
                yield _decode(line)
