"""Histories of a correct lease store, made up: the checker's test material and benchmark.

``simulate`` runs clients against an exact lease store in simulated time: each call takes
effect at one moment between its invocation and completion, the store grants, expires and
fences exactly as the model allows, and some answers are lost (the call may or may not have
taken effect, chosen at random). Every history it makes is therefore linearizable, however
the calls overlap. It simulates locks, semaphores, read-write locks (a third of the
acquires write) and elections (``leader()`` in place of ``locked()`` and ``inspect()``).
"""

from __future__ import annotations

import dataclasses
import heapq
import random
from typing import Any

from tenure.verify.history import Operation

__all__ = ["simulate"]


@dataclasses.dataclass
class _Lease:
    lease: str
    expires: float
    fence: int
    mode: str | None = None


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
    primitive: str | None = None,
) -> list[Operation]:
    """A linearizable history of ``operations`` calls by ``clients`` on ``names`` names.

    ``latency``: the longest time from a call's invocation to its effect, and from its effect
    to its answer (seconds); ``lost``: the share of calls whose answer is lost; ``limit``:
    1 for locks, more for semaphores of that many permits; ``primitive``: "rwlock" or
    "election" (default: a lock, or a semaphore when ``limit`` is above 1)."""
    rng = random.Random(seed)
    primitive = primitive or ("lock" if limit == 1 else "semaphore")
    reads = ("leader",) * 2 if primitive == "election" else ("locked", "inspect")
    live: dict[str, list[_Lease]] = {f"n{i}": [] for i in range(names)}
    fences = {name: 0 for name in live}
    history: list[Operation] = []
    people = [_Client(number) for number in range(clients)]
    # (moment of effect, tie-break, client, invoked, planned call: kind, name, lease, ttl,
    # mode)
    pending: list[tuple[float, int, int, float, tuple[str, str, str | None, float,
                                                       str | None]]] = []
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
            kind = rng.choice(("acquire", "acquire", "acquire", *reads))
            if kind == "acquire":
                client.acquired += 1
                lease = f"{client.number}.{client.acquired}"
        mode = None
        if primitive == "rwlock" and kind in ("acquire", "locked"):
            mode = "write" if rng.random() < 1 / 3 else "read"
        sequence += 1
        heapq.heappush(pending, (effect, sequence, client.number, invoked,
                                 (kind, name, lease, ttl * rng.uniform(0.5, 1.5), mode)))

    for client in people:
        plan(client, 0.0)
    while len(history) < operations:
        effect, _, number, invoked, (kind, name, lease, lease_ttl, mode) = heapq.heappop(
            pending)
        client = people[number]
        leases = live[name]
        leases[:] = [held for held in leases if held.expires > effect]
        mine = next((held for held in leases if held.lease == lease), None)
        answer_lost = rng.random() < lost
        # A call whose answer is lost may not have reached the store at all.
        applies = not answer_lost or rng.random() < 0.5
        outcome, fence, held = "ok", None, None
        record_ttl = None
        answer: dict[str, Any] = {}
        if kind == "acquire":
            record_ttl = lease_ttl
            if not _in_the_way(leases, limit, mode):
                if applies:
                    fences[name] += rng.randint(1, 3)
                    fence = fences[name]
                    leases.append(_Lease(str(lease), effect + lease_ttl, fence, mode))
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
            answer = _read(kind, leases, limit, mode, primitive)
        completed: float | None = effect + rng.uniform(0, latency)
        if answer_lost:
            outcome, completed, fence, held, answer = "unknown", None, None, None, {}
            if kind in ("extend", "owned"):
                client.holding = None  # the client gives a lease in doubt up
        fields: dict[str, Any] = {
            "lease": lease if kind not in ("locked", "inspect", "leader") else None,
            "fence": fence, "held": held, "mode": mode, **answer}
        history.append(Operation(
            client=number, name=name, kind=kind, invoked=invoked, completed=completed,
            outcome=outcome, ttl=record_ttl, primitive=primitive, limit=limit,
            error="lost answer" if answer_lost else None, **fields,
        ))
        plan(client, effect if completed is None else completed)
    return history


def _in_the_way(leases: list[_Lease], limit: int, mode: str | None) -> bool:
    """Whether a new lease (of ``mode``, for a read-write lock) would be refused."""
    if mode is None:
        return len(leases) >= limit
    return any(held.mode == "write" or mode == "write" for held in leases)


def _read(kind: str, leases: list[_Lease], limit: int, mode: str | None,
          primitive: str) -> dict[str, Any]:
    """The fields of what ``locked``, ``inspect`` or ``leader`` answers."""
    if kind == "leader":
        if not leases:
            return {"held": False}
        return {"held": True, "lease": leases[0].lease, "fence": leases[0].fence}
    if primitive == "rwlock" and kind == "inspect":
        if not leases:
            return {"held": False}
        modes = {held.mode for held in leases}
        return {"held": True, "mode": "write" if "write" in modes else "read",
                "fences": tuple(sorted(held.fence for held in leases))}
    held = _in_the_way(leases, limit, mode)
    return {"held": held, "fence": leases[0].fence if (
        kind == "inspect" and held and limit == 1) else None}
