"""``check(history)``: split the history by name, search each part for a linearization under
the lease model, and report the verdict with, for a violation, the excerpt that explains it.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterable, Sequence

from tenure._errors import InvalidArgument
from tenure.verify.history import READS, Operation, partition
from tenure.verify.model import ClockAllowance, LeaseModel
from tenure.verify.primitives import model_for
from tenure.verify.search import Stuck, search

__all__ = ["DEFAULT_BUDGET", "Report", "Violation", "check"]

DEFAULT_BUDGET = 60.0
"""Seconds the whole check may take before the names left are reported "unknown"."""


@dataclasses.dataclass(frozen=True, slots=True)
class Violation:
    """One name whose calls have no valid order."""

    primitive: str
    name: str
    operations: tuple[Operation, ...]
    """Every call of the name (as checked: unanswered reads left out), in invocation order;
    ``stuck`` indexes into it."""
    stuck: Stuck
    """Where the search of the whole name got furthest."""
    alone: tuple[int, ...] = ()
    """When not empty: calls that have no valid order on their own, for the same reason
    (``alone_stuck``): the excerpt shown, which a reader can check by hand."""
    alone_stuck: Stuck | None = None

    @property
    def excerpt(self) -> list[int]:
        """The calls that explain the violation (indexes into ``operations``, by invocation
        time): ``alone`` if found, else the call that could not be placed, the calls that
        could have gone before it, and the grants and extensions of the leases live there."""
        if self.alone:
            return list(self.alone)
        return _context(self.operations, self.stuck)


def _context(operations: Sequence[Operation], stuck: Stuck) -> list[int]:
    """The calls around the point where ``stuck`` ended (``Violation.excerpt``)."""
    chosen = {stuck.blocking, *stuck.candidates}
    for state in stuck.states:
        # The grant of the last fence, and of a read-write lock's last write fence (a fence
        # that goes back is judged against them).
        judged = {state.last_fence, state.last_write} - {None}
        chosen.update(i for i in stuck.placed if operations[i].kind == "acquire"
                      and operations[i].fence in judged)
        # The grant of the lease whose expiry bounds the calls placed next.
        chosen.update(i for i in stuck.placed if operations[i].kind == "acquire"
                      and operations[i].lease == state.not_before_lease)
        for lease in state.leases:
            chosen.add(lease.set_by)
            chosen.update(i for i, op in enumerate(operations)
                          if op.kind == "acquire" and op.lease == lease.lease)
    # The grant of any lease a chosen call is about (why its client believed it held), and
    # the release of a lease a read names (why it had ended: a resigned leader).
    leases = {operations[i].lease for i in chosen if operations[i].lease}
    read = {operations[i].lease for i in chosen if operations[i].kind in READS}
    chosen.update(i for i in stuck.placed if (
        (operations[i].kind == "acquire" and operations[i].lease in leases)
        or (operations[i].kind == "release" and operations[i].lease in read)))
    return sorted(chosen, key=lambda i: (operations[i].invoked, i))


def _alone(model: LeaseModel, operations: Sequence[Operation], stuck: Stuck,
           deadline: float) -> tuple[tuple[int, ...], Stuck | None]:
    """The smallest excerpt found that has no valid order on its own, with the same call
    blocked for the same reason as in the whole name: the context excerpt checked alone,
    then without each call whose removal only takes a constraint away (an answer that
    changed nothing: a read, a refusal, a "not ours"), one at a time. ``((), None)`` when
    the context excerpt needs the rest of the history to fail."""
    blocked = stuck.reasons.get(stuck.blocking)

    def attempt(indices: list[int]) -> Stuck | None:
        outcome = search(model, [operations[i] for i in indices], deadline)
        if outcome.verdict != "violation" or outcome.stuck is None:
            return None
        found = _renumbered(outcome.stuck, indices)
        if found.blocking != stuck.blocking or found.reasons.get(found.blocking) != blocked:
            return None
        return found

    kept = _context(operations, stuck)
    found = attempt(kept)
    if found is None:
        return (), None
    for index in list(kept):
        op = operations[index]
        if index == stuck.blocking or not (op.kind in READS or op.outcome == "fail"):
            continue
        trial = [i for i in kept if i != index]
        smaller = attempt(trial)
        if smaller is not None:
            kept, found = trial, smaller
    return tuple(kept), found


def _renumbered(stuck: Stuck, indices: list[int]) -> Stuck:
    """``stuck`` of a search over ``operations[i] for i in indices``, in the whole name's
    numbering."""
    states = frozenset(
        state._replace(leases=tuple(lease._replace(set_by=indices[lease.set_by])
                                    for lease in state.leases))
        for state in stuck.states)
    return Stuck(
        placed=frozenset(indices[i] for i in stuck.placed),
        states=states,
        blocking=indices[stuck.blocking],
        candidates=tuple(indices[i] for i in stuck.candidates),
        reasons={indices[i]: why for i, why in stuck.reasons.items()},
    )


@dataclasses.dataclass(frozen=True, slots=True)
class Report:
    """The verdict on a history."""

    operations: int
    """Calls checked (unanswered reads are not counted: they constrain nothing)."""
    names: int
    clients: int
    violations: tuple[Violation, ...]
    unknown: tuple[tuple[str, str], ...]
    """(primitive, name) parts the time budget ran out on."""
    seconds: float

    @property
    def linearizable(self) -> bool | None:
        """True: every name has a valid order; False: at least one has none; None: the
        budget ran out before an answer (and no violation was found)."""
        if self.violations:
            return False
        return None if self.unknown else True

    def summary(self) -> str:
        counts = (f"{self.operations} operations on {self.names} names, "
                  f"{self.clients} clients")
        if self.violations:
            return (f"not linearizable: {len(self.violations)} of {self.names} names have "
                    f"no valid order ({counts})")
        if self.unknown:
            return (f"unknown: the time budget ran out on {len(self.unknown)} of "
                    f"{self.names} names ({counts})")
        return f"linearizable: {counts}"


def check(
    history: Iterable[Operation],
    *,
    allowance: ClockAllowance | None = None,
    budget: float = DEFAULT_BUDGET,
    strict_refusals: bool = False,
) -> Report:
    """Check ``history`` against the fenced-lease model of each call's primitive (a lock, a
    semaphore, a read-write lock, an election: ``tenure.verify.primitives``), one
    (primitive, name) at a time.

    Each name starts free. ``budget`` bounds the whole check (seconds); names not decided
    in time are reported in ``Report.unknown``. ``strict_refusals``: a refused acquire needs
    the name held (see ``tenure.verify.model``; off by default, as stores that queue waiters
    refuse newcomers while the name is free). Raises InvalidArgument for a malformed
    operation or a lease used on two names."""
    operations = list(history)
    for number, operation in enumerate(operations):
        problems = operation.problems()
        if problems:
            raise InvalidArgument(f"operation {number} ({operation}): {'; '.join(problems)}")
    started = time.monotonic()
    deadline = started + budget
    violations: list[Violation] = []
    unknown: list[tuple[str, str]] = []
    parts = partition(operations)
    _check_leases(parts)
    checked = 0
    for key, part in sorted(parts.items()):
        calls = tuple(sorted(
            (op for op in part if not (op.kind in READS and op.outcome == "unknown")),
            key=lambda op: op.invoked,
        ))
        checked += len(calls)
        limits = {op.limit for op in calls}
        if len(limits) > 1:
            raise InvalidArgument(f"{key[0]} {key[1]!r} is used with limits {sorted(limits)}")
        model = model_for(key[0], limits.pop() if limits else 1, allowance,
                          strict_refusals=strict_refusals)
        outcome = search(model, calls, deadline)
        if outcome.verdict == "violation":
            assert outcome.stuck is not None
            alone, alone_stuck = _alone(model, calls, outcome.stuck, deadline)
            violations.append(Violation(key[0], key[1], calls, outcome.stuck, alone,
                                        alone_stuck))
        elif outcome.verdict == "unknown":
            unknown.append(key)
    return Report(
        operations=checked,
        names=len(parts),
        clients=len({op.client for op in operations}),
        violations=tuple(violations),
        unknown=tuple(unknown),
        seconds=time.monotonic() - started,
    )


def _check_leases(parts: dict[tuple[str, str], list[Operation]]) -> None:
    where: dict[str, tuple[str, str]] = {}
    for key, part in parts.items():
        for op in part:
            if op.lease is None:
                continue
            if where.setdefault(op.lease, key) != key:
                raise InvalidArgument(f"lease {op.lease!r} is used on {where[op.lease]} and {key}")
