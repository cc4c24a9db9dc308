"""Histories of a correct lease store, made up: the checker's test material and benchmark.

``simulate`` runs clients against an exact lease store in simulated time: each call takes
effect at one moment between its invocation and completion, the store grants, expires and
fences exactly as the model allows, and some answers are lost (the call may or may not have
taken effect, chosen at random). Every history it makes is therefore linearizable, however
the calls overlap.
"""

from __future__ import annotations

import dataclasses
import heapq
import random

from tenure.verify.history import Operation

__all__ = ["simulate"]


@dataclasses.dataclass
class _Lease:
    lease: str
    expires: float
    fence: int


@dataclasses.dataclass
class _Client:
    number: int
    holding: tuple[str, str] | None = None  # (name, lease)
    acquired: int = 0


def simulate(
    operations: int,
    *,
    clients: int = 8,
    names: int = 4,
    ttl: float = 0.2,
    latency: float = 0.01,
    lost: float = 0.01,
    limit: int = 1,
    seed: int = 0,
) -> list[Operation]:
    """A linearizable history of ``operations`` calls by ``clients`` on ``names`` names.

    ``latency``: the longest time from a call's invocation to its effect, and from its effect
    to its answer (seconds); ``lost``: the share of calls whose answer is lost; ``limit``:
    1 for locks, more for semaphores of that many permits."""
    rng = random.Random(seed)
    primitive = "lock" if limit == 1 else "semaphore"
    live: dict[str, list[_Lease]] = {f"n{i}": [] for i in range(names)}
    fences = {name: 0 for name in live}
    history: list[Operation] = []
    people = [_Client(number) for number in range(clients)]
    # (moment of effect, tie-break, client, invoked, planned call)
    pending: list[tuple[float, int, int, float, tuple[str, str, str | None, float]]] = []
    sequence = 0

    def plan(client: _Client, now: float) -> None:
        nonlocal sequence
        invoked = now + rng.uniform(0, latency)
        effect = invoked + rng.uniform(0, latency)
        if client.holding is not None:
            name, lease = client.holding
            kind = rng.choice(("extend", "extend", "release", "release", "owned"))
        else:
            name, lease = rng.choice(list(live)), None
            kind = rng.choice(("acquire", "acquire", "acquire", "locked", "inspect"))
            if kind == "acquire":
                client.acquired += 1
                lease = f"{client.number}.{client.acquired}"
        sequence += 1
        heapq.heappush(pending, (effect, sequence, client.number, invoked,
                                 (kind, name, lease, ttl * rng.uniform(0.5, 1.5))))

    for client in people:
        plan(client, 0.0)
    while len(history) < operations:
        effect, _, number, invoked, (kind, name, lease, lease_ttl) = heapq.heappop(pending)
        client = people[number]
        leases = live[name]
        leases[:] = [held for held in leases if held.expires > effect]
        mine = next((held for held in leases if held.lease == lease), None)
        answer_lost = rng.random() < lost
        # A call whose answer is lost may not have reached the store at all.
        applies = not answer_lost or rng.random() < 0.5
        outcome, fence, held = "ok", None, None
        record_ttl = None
        if kind == "acquire":
            record_ttl = lease_ttl
            if len(leases) < limit:
                if applies:
                    fences[name] += rng.randint(1, 3)
                    fence = fences[name]
                    leases.append(_Lease(str(lease), effect + lease_ttl, fence))
                client.holding = (name, str(lease)) if not answer_lost else None
            else:
                outcome = "fail"
        elif kind == "extend":
            record_ttl = lease_ttl
            if mine is None:
                outcome, client.holding = "fail", None
            elif applies:
                mine.expires = effect + lease_ttl
        elif kind == "release":
            client.holding = None
            if mine is None:
                outcome = "fail"
            elif applies:
                leases.remove(mine)
        elif kind == "owned":
            held = mine is not None
            if not held:
                client.holding = None
        else:
            held = len(leases) >= limit
            if kind == "inspect" and held and limit == 1:
                fence = leases[0].fence
        completed: float | None = effect + rng.uniform(0, latency)
        if answer_lost:
            outcome, completed, fence, held = "unknown", None, None, None
            if kind in ("extend", "owned"):
                client.holding = None  # the client gives a lease in doubt up
        history.append(Operation(
            client=number, name=name, kind=kind, invoked=invoked, completed=completed,
            outcome=outcome, lease=lease if kind not in ("locked", "inspect") else None,
            ttl=record_ttl, fence=fence, held=held, primitive=primitive, limit=limit,
            error="lost answer" if answer_lost else None,
        ))
        plan(client, effect if completed is None else completed)
    return history
