"""The linearizability search for one part of a history (one name): Wing and Gong's
algorithm with Lowe's memoisation, as Porcupine implements it.

The calls and returns of the part sit in one list in time order (a call before a return at
the same instant, so touching calls count as concurrent). The search walks the list: at a
call it tries to place that operation next (the model must accept it from the current
states); at a return it has met an operation that had to be placed before this point and
was not, so it undoes its latest placement and tries the next call instead. Placing every
operation is a linearization. The cache holds every (set of placed operations, model state)
met: reaching one again cannot lead anywhere new, which is what makes the search practical.

The model is nondeterministic (a lease may or may not have expired, an unanswered call may
or may not have taken effect), so the state is the *set* of model states possible after the
placed operations (Porcupine's "power-set" construction): one search, no branching on the
model's choices.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence

from tenure.verify.history import Operation
from tenure.verify.model import LeaseModel, State

__all__ = ["Stuck", "search"]

States = frozenset[State]


@dataclasses.dataclass(frozen=True, slots=True)
class Stuck:
    """Where the deepest attempt ended: every operation in ``placed`` linearized, leaving
    ``states``, and then ``blocking`` (whose answer came back at this point) could not be
    placed, nor could any of ``candidates`` (the operations that could have gone first)
    lead past it."""

    placed: frozenset[int]
    states: States
    blocking: int
    candidates: tuple[int, ...]
    reasons: dict[int, str]
    """Why each candidate (and the blocking operation) is impossible in ``states``."""


@dataclasses.dataclass(frozen=True, slots=True)
class Outcome:
    verdict: str
    """"ok", "violation" or "unknown" (the time budget ran out)."""
    stuck: Stuck | None = None
    explored: int = 0
    """How many (placed set, state) pairs the search met."""


def _step(model: LeaseModel, states: States, index: int, op: Operation) -> tuple[States, str]:
    following: set[State] = set()
    why = ""
    for state in states:
        successors, reason = model.step(state, index, op)
        following.update(successors)
        if not successors and not why:
            why = reason
    return frozenset(following), why


def search(model: LeaseModel, ops: Sequence[Operation], deadline: float) -> Outcome:
    """Whether ``ops`` (one name's calls) have a linearization under ``model``; "unknown"
    once ``time.monotonic()`` passes ``deadline``."""
    count = len(ops)
    if count == 0:
        return Outcome("ok")
    # Entries 1..2n: (time, 0 = call / 1 = return, op). Entry 0 is the list's head.
    events = sorted(
        [(op.invoked, 0, i) for i, op in enumerate(ops)]
        + [(op.latest, 1, i) for i, op in enumerate(ops)]
    )
    size = len(events) + 1
    is_call = [False] * size
    op_of = [0] * size
    match = [0] * size
    call_entry = [0] * count
    for position, (_, kind, index) in enumerate(events, 1):
        op_of[position] = index
        if kind == 0:
            is_call[position] = True
            call_entry[index] = position
        else:
            match[call_entry[index]] = position
    nxt = list(range(1, size + 1))
    nxt[-1] = 0  # 0 is also "no next": entry 0 is only ever a head
    prv = list(range(-1, size - 1))

    def lift(entry: int) -> None:
        nxt[prv[entry]] = nxt[entry]
        prv[nxt[entry]] = prv[entry]
        other = match[entry]
        nxt[prv[other]] = nxt[other]
        if nxt[other]:
            prv[nxt[other]] = prv[other]

    def unlift(entry: int) -> None:
        other = match[entry]
        nxt[prv[other]] = other
        if nxt[other]:
            prv[nxt[other]] = other
        nxt[prv[entry]] = entry
        prv[nxt[entry]] = entry

    states: States = frozenset([model.initial()])
    placed = 0
    seen: set[tuple[int, States]] = set()
    stack: list[tuple[int, States]] = []
    entry = nxt[0]
    deepest = -1
    frontier: tuple[States, int, int, list[int]] | None = None
    steps = 0
    while nxt[0]:
        steps += 1
        if not steps & 0xFFF and time.monotonic() > deadline:
            return Outcome("unknown", explored=len(seen))
        index = op_of[entry]
        if is_call[entry]:
            following, _ = _step(model, states, index, ops[index])
            if following:
                now_placed = placed | (1 << index)
                key = (now_placed, following)
                if key not in seen:
                    seen.add(key)
                    stack.append((entry, states))
                    states, placed = following, now_placed
                    lift(entry)
                    entry = nxt[0]
                    continue
            entry = nxt[entry]
            continue
        # A return: its operation had to be placed before this point.
        if len(stack) > deepest:
            deepest = len(stack)
            frontier = (states, placed, index, _calls_before(entry, nxt, is_call, op_of))
        if not stack:
            assert frontier is not None
            return Outcome("violation", _stuck(model, ops, frontier), len(seen))
        entry, states = stack.pop()
        placed &= ~(1 << op_of[entry])
        unlift(entry)
        entry = nxt[entry]
    return Outcome("ok", explored=len(seen))


def _calls_before(entry: int, nxt: list[int], is_call: list[bool], op_of: list[int]) -> list[int]:
    """The operations whose calls are still in the list before ``entry``: those that could
    have been placed next."""
    found = []
    walk = nxt[0]
    while walk and walk != entry:
        if is_call[walk]:
            found.append(op_of[walk])
        walk = nxt[walk]
    return found


def _stuck(model: LeaseModel, ops: Sequence[Operation],
           frontier: tuple[States, int, int, list[int]]) -> Stuck:
    states, placed, blocking, candidates = frontier
    reasons: dict[int, str] = {}
    for index in candidates:
        following, why = _step(model, states, index, ops[index])
        if not following:
            reasons[index] = why
    placed_set = frozenset(i for i in range(len(ops)) if placed >> i & 1)
    return Stuck(placed_set, states, blocking, tuple(candidates), reasons)
