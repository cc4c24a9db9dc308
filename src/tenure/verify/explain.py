"""A violation told to a person: the excerpt of the history as a table, then why no order
of it is valid."""

from __future__ import annotations

import math

from tenure.verify.check import Violation
from tenure.verify.model import State

__all__ = ["describe_violation"]


def _time(value: float, origin: float) -> str:
    return "      never" if math.isinf(value) else f"{value - origin:9.3f} s"


def _state(state: State, origin: float) -> str:
    # The last fences, unless a live lease shows them (a fence that goes back is judged
    # against them; a read-write lock's reads against the last write's).
    live = {None, *(lease.fence for lease in state.leases)}
    last = "" if state.last_fence in live else f" (last fence {state.last_fence})"
    if state.last_write not in live | {state.last_fence}:
        last += f" (last write fence {state.last_write})"
    if state.not_before is not None:
        last += (f" (the calls placed next take effect from {state.not_before - origin:.3f} s, "
                 f"after lease {state.not_before_lease} expired)")
    if not state.leases:
        return "free" + last
    parts = []
    for lease in state.leases:
        fence = "unknown fence" if lease.fence is None else f"fence {lease.fence}"
        mode = "" if lease.mode is None else f"{lease.mode} "
        parts.append(f"{mode}lease {lease.lease} live ({fence}, may expire from "
                     f"{lease.ends_after - origin:.3f} s)")
    return ", ".join(parts) + last


def describe_violation(violation: Violation, origin: float = 0.0) -> str:
    """The excerpt and the reason, several lines. ``origin``: the time shown as 0."""
    ops = violation.operations
    excerpt = violation.excerpt
    if violation.alone_stuck is not None:
        stuck = violation.alone_stuck
        lines = [f"{violation.primitive} {violation.name!r}: no valid order of its "
                 f"{len(ops)} calls. These {len(excerpt)} of them have none on their own:"]
    else:
        stuck = violation.stuck
        lines = [f"{violation.primitive} {violation.name!r}: no valid order of its "
                 f"{len(ops)} calls. The excerpt where every order stops (the calls "
                 "before it leave the state given below):"]
    lines.append(f"  {'#':>5}  {'client':>6}  {'invoked':>11}  {'completed':>11}  call -> answer")
    for index in excerpt:
        op = ops[index]
        mark = "  <- cannot be placed" if index == stuck.blocking else ""
        lines.append(f"  {index:>5}  {op.client:>6}  {_time(op.invoked, origin)}  "
                     f"{_time(op.latest, origin)}  {op.describe()}{mark}")
    earlier = len(stuck.placed)
    states = sorted(stuck.states)
    lines.append(
        f"Why: every order fails; the longest found orders {earlier} "
        f"call{'s' if earlier != 1 else ''} before #{stuck.blocking}, leaving "
        + (" or ".join(_state(state, origin) for state in states) if states else "nothing")
        + f"; then call #{stuck.blocking} must take effect before it completes at "
        f"{_time(ops[stuck.blocking].latest, origin).strip()}, and no call in flight can "
        "go next:"
    )
    for index in [stuck.blocking, *(i for i in stuck.candidates if i != stuck.blocking)]:
        reason = stuck.reasons.get(index)
        if reason:
            lines.append(f"  #{index}: {reason}")
    others = [i for i in stuck.candidates if i != stuck.blocking and i not in stuck.reasons]
    if others:
        shown = ", ".join(f"#{i}" for i in others)
        lines.append(f"  (placing {shown} first leads to the same dead end)")
    return "\n".join(lines)
