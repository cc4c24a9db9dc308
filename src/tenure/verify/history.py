"""A recorded history: one ``Operation`` per call a client made, with the client's clock
readings around it and what the call answered.

Times are seconds on one monotonic clock shared by every client (``time.monotonic()`` is
system-wide on Linux and macOS, so processes of one host can share it). A call is *invoked*
when the client sent it and *completed* when the answer came back; the service acted at some
moment in between, the call's linearization point. A call whose answer never came (an error,
a timeout) has ``outcome = "unknown"`` and no completion time: it may or may not have taken
effect, at any moment after its invocation (Porcupine records such calls the same way).

What each kind answers (``outcome``, and ``fence`` / ``held`` where they apply):

=========== ================================================ =================================
kind        ``ok``                                           ``fail``
=========== ================================================ =================================
acquire     granted; ``fence`` is the grant's fencing token  refused: the name stayed held
release     the lease was ours and is released               not ours (NotOwned, LockLost)
extend      the lease was ours and restarts for ``ttl``      not ours any more (LockLost)
owned       answered; ``held`` says whether the lease is live
locked      answered; ``held`` says whether the name is held (a semaphore: all permits)
inspect     answered; ``held`` as locked, ``fence`` the live holder's fence (a lock)
leader      answered; ``held``: an election has a leader, ``lease`` its lease (the value it
            campaigned with), ``fence`` its term
=========== ================================================ =================================

``lease`` names one acquisition (any string unique in the history, e.g. "3.17" for the
17th acquire of client 3): the acquire that tried it and every later call about it carry it.

The primitives (``primitive``): ``lock``; ``semaphore`` of ``limit`` permits; ``rwlock``, a
read-write lock whose calls carry the ``mode`` of their side ("read" or "write"; a fair lock
is the write side), its ``inspect`` answering the ``mode`` of the leases it listed and their
``fences``; ``election``, a lock whose acquire is a campaign (the value the lease, the fence
the term), release a resignation, read with ``leader``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable

__all__ = [
    "KINDS",
    "MODES",
    "OUTCOMES",
    "PRIMITIVES",
    "Operation",
    "partition",
]

KINDS = ("acquire", "release", "extend", "owned", "locked", "inspect", "leader")
READS = frozenset({"owned", "locked", "inspect", "leader"})
"""Kinds that change nothing: their answer is the only thing checked."""
OUTCOMES = ("ok", "fail", "unknown")
PRIMITIVES = ("lock", "semaphore", "rwlock", "election")
MODES = ("read", "write")


@dataclasses.dataclass(frozen=True, slots=True)
class Operation:
    """One call and its answer. Build them with keywords; ``check()`` validates them."""

    client: int
    """Which client made the call (a process or thread: its calls never overlap)."""
    name: str
    """The name the call is about; each (primitive, name) is checked on its own."""
    kind: str
    """One of ``KINDS``."""
    invoked: float
    """When the call was sent (seconds, the shared monotonic clock)."""
    completed: float | None
    """When its answer came back; None when it never came (``outcome == "unknown"``)."""
    outcome: str
    """``"ok"``, ``"fail"`` or ``"unknown"`` (the table in the module docstring)."""
    lease: str | None = None
    """The acquisition this call is about (acquire, release, extend, owned)."""
    ttl: float | None = None
    """The lease's ttl for acquire and extend (seconds)."""
    fence: int | None = None
    """The fence an acquire was granted, or the holder's fence an inspect read."""
    held: bool | None = None
    """The answer of owned, locked and inspect."""
    primitive: str = "lock"
    """One of ``PRIMITIVES``: ``"semaphore"`` with ``limit``, the number of permits."""
    limit: int = 1
    mode: str | None = None
    """A read-write lock's side, "read" or "write": the lease's for acquire (and, optionally,
    release, extend, owned), the handle's for locked, the listed leases' for inspect (None
    when it listed none; "write" when it listed a writer)."""
    fences: tuple[int, ...] | None = None
    """The fences of the leases a read-write lock's inspect listed (None: not recorded)."""
    error: str | None = None
    """For an unknown outcome, what went wrong (shown in reports)."""

    @property
    def latest(self) -> float:
        """The latest moment the call can have taken effect (infinity when unanswered)."""
        return math.inf if self.completed is None else self.completed

    @property
    def key(self) -> tuple[str, str]:
        """What the call is checked with: the calls of one (primitive, name)."""
        return (self.primitive, self.name)

    def problems(self) -> list[str]:
        """What makes this record unusable (empty when it is well formed)."""
        found = []
        if self.kind not in KINDS:
            found.append(f"kind {self.kind!r} is not one of {', '.join(KINDS)}")
        if self.outcome not in OUTCOMES:
            found.append(f"outcome {self.outcome!r} is not one of {', '.join(OUTCOMES)}")
        if self.primitive not in PRIMITIVES:
            found.append(f"primitive {self.primitive!r} is not one of {', '.join(PRIMITIVES)}")
        if self.primitive != "semaphore" and self.limit != 1:
            found.append(f"a{'n' if self.primitive[0] in 'ae' else ''} {self.primitive} has "
                         "limit 1")
        found.extend(self._mode_problems())
        if self.limit < 1:
            found.append(f"limit must be at least 1, not {self.limit}")
        if (self.completed is None) != (self.outcome == "unknown"):
            found.append("an unknown outcome, and only it, has no completion time")
        elif self.completed is not None and self.completed < self.invoked:
            found.append("completed before it was invoked")
        if self.kind in ("acquire", "release", "extend", "owned") and self.lease is None:
            found.append(f"{self.kind} needs the lease it is about")
        if self.kind in ("acquire", "extend") and (self.ttl is None or not self.ttl > 0):
            found.append(f"{self.kind} needs its ttl (> 0)")
        if self.kind in READS:
            if self.outcome == "fail":
                found.append(f"{self.kind} answers ok (with held) or unknown, never fail")
            if self.outcome == "ok" and self.held is None:
                found.append(f"an answered {self.kind} needs held")
        if self.kind == "acquire" and self.outcome == "ok" and self.fence is None:
            found.append("a granted acquire needs its fence")
        if self.kind == "leader" and self.primitive != "election":
            found.append("leader is an election's call")
        if self.kind == "leader" and self.held and (self.lease is None or self.fence is None):
            found.append("a leader answer needs the leader's lease (its value) and term")
        return found

    def _mode_problems(self) -> list[str]:
        if self.primitive != "rwlock":
            if self.mode is not None or self.fences is not None:
                return ["mode and fences are a read-write lock's"]
            return []
        if self.mode is not None and self.mode not in MODES:
            return [f"mode {self.mode!r} is not one of {', '.join(MODES)}"]
        if self.kind in ("acquire", "locked") and self.mode is None:
            return [f"a read-write lock's {self.kind} needs its mode (read or write)"]
        if self.kind == "inspect" and self.outcome == "ok" and (
                self.held != (self.mode is not None)
                or (self.fences is not None and bool(self.fences) != self.held)):
            return ["a read-write lock's inspect answers a mode, and fences, exactly when "
                    "it listed leases (held)"]
        return []

    def describe(self) -> str:
        """The call and its answer in a few words, e.g. ``acquire 3.17 -> granted, fence 41``
        (an election's: ``campaign 3.17 -> elected, term 41``)."""
        election = self.primitive == "election"
        verb = {"acquire": "campaign", "release": "resign"}.get(self.kind, self.kind) if (
            election) else self.kind
        if self.mode is not None and self.kind != "inspect":
            verb += f", {self.mode} side" if self.kind == "locked" else f" {self.mode}"
        shown = self.lease is not None and self.kind not in ("locked", "leader")
        call = verb + (f" {self.lease}" if shown else "")
        if self.kind in ("acquire", "extend") and self.ttl is not None:
            call += f" (ttl {self.ttl:g} s)"
        if self.outcome == "unknown":
            return f"{call} -> unknown ({self.error or 'no answer'})"
        fence = "term" if election else "fence"
        if self.kind == "acquire":
            if self.outcome != "ok":
                return f"{call} -> {'not elected' if election else 'refused (held)'}"
            return f"{call} -> {'elected' if election else 'granted'}, {fence} {self.fence}"
        if self.kind in ("release", "extend"):
            return f"{call} -> {'ok' if self.outcome == 'ok' else 'not ours'}"
        return f"{call} -> {self._answer()}"

    def _answer(self) -> str:
        """What a read (owned, locked, inspect, leader) answered."""
        if self.kind == "owned":
            return "ours" if self.held else "not ours"
        if not self.held:
            return "no leader" if self.kind == "leader" else "not held"
        if self.kind == "leader":
            return f"{self.lease}, term {self.fence}"
        if self.kind == "inspect" and self.mode is not None:
            listed = "a writer" if self.mode == "write" else "readers"
            if self.fences is not None:
                listed += ", fence" + ("s " if len(self.fences) > 1 else " ") + ", ".join(
                    str(fence) for fence in self.fences)
            return listed
        if self.kind == "inspect" and self.fence is not None:
            return f"held, fence {self.fence}"
        return "held"


def partition(history: Iterable[Operation]) -> dict[tuple[str, str], list[Operation]]:
    """The history split by (primitive, name): leases of different names never interact, so
    each part is checked alone (linearizability is compositional: Herlihy and Wing)."""
    parts: dict[tuple[str, str], list[Operation]] = {}
    for operation in history:
        parts.setdefault(operation.key, []).append(operation)
    return parts
