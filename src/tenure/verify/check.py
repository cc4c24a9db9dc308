"""``check(history)``: split the history by name, search each part for a linearization under
the lease model, and report the verdict with, for a violation, the excerpt that explains it.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterable

from tenure._errors import InvalidArgument
from tenure.verify.history import READS, Operation, partition
from tenure.verify.model import ClockAllowance, LeaseModel
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

    @property
    def excerpt(self) -> list[int]:
        """The calls that explain the violation (indexes into ``operations``, by invocation
        time): the call that could not be placed, the calls that could have gone before it,
        and the grants and extensions of the leases live at that point."""
        chosen = {self.stuck.blocking, *self.stuck.candidates}
        for state in self.stuck.states:
            for lease in state.leases:
                chosen.add(lease.set_by)
                chosen.update(i for i, op in enumerate(self.operations)
                              if op.kind == "acquire" and op.lease == lease.lease)
        # The grant of any lease a chosen call is about (why its client believed it held).
        leases = {self.operations[i].lease for i in chosen if self.operations[i].lease}
        chosen.update(i for i in self.stuck.placed
                      if self.operations[i].kind == "acquire" and self.operations[i].lease
                      in leases)
        return sorted(chosen, key=lambda i: (self.operations[i].invoked, i))


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
) -> Report:
    """Check ``history`` against the fenced-lease model, one (primitive, name) at a time.

    Each name starts free. ``budget`` bounds the whole check (seconds); names not decided
    in time are reported in ``Report.unknown``. Raises InvalidArgument for a malformed
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
        model = LeaseModel(limits.pop() if limits else 1, allowance)
        outcome = search(model, calls, deadline)
        if outcome.verdict == "violation":
            assert outcome.stuck is not None
            violations.append(Violation(key[0], key[1], calls, outcome.stuck))
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
