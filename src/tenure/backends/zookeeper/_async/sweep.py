"""ZooKeeper for asyncio: the clean-up of idle names (``gc_after``, DESIGN rule 10).

A name's node (``/{ns}/{kind}/{N}``, persistent: its data is the name's last fence, for
``inspect``) stays when its last holder or waiter goes. A pass removes the nodes of names
idle for ``gc_after``, judged by the server's clock and the node's own stat, so any client
may finish what another began (a one-shot ``tenure run`` leaves nothing a later pass of any
process cannot judge):

- a node with children is in use: left alone;
- a node whose children changed after its last write (``pzxid > mzxid``: a holder or waiter
  went without writing it, its fence being there already) is **marked**: its data is
  rewritten as it is, versioned, so that its ``mtime`` is the server's time now;
- a node without children and not changed since its last write (a release's multi writes
  the fence and deletes the holder's node in one transaction: ``pzxid == mzxid``) has been
  idle since its ``mtime``: once that is ``gc_after`` before the server's time now, it is
  **deleted**, guarded by the version read. ZooKeeper refuses to delete a node with
  children, so a holder or waiter that arrived meanwhile keeps it; one that arrives after
  finds no parent and makes it again (every create of a holder's or waiter's node passes
  ``makepath``).

Fences never go back: they are the holder nodes' ``czxid``, which the ensemble's zxid
orders; the name's node only lets ``inspect`` show the last one of a released name.

A pass goes over at most ``SWEEP_BATCH`` names of one kind, resuming where the last stopped,
and runs after a release, at most once per ``gc_reuse`` seconds per client and kind (the
first one that long after the client began): three requests plus one per name looked at.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kazoo.exceptions import NoNodeError

from tenure.backends.zookeeper._async.session import AsyncSession

__all__ = ["SWEEP_BATCH", "gc_reuse", "sweep"]

SWEEP_BATCH = 500
"""Names looked at by one pass."""


def gc_reuse(gc_after: float) -> float:
    """Seconds between two passes of one client over one kind: a tenth of ``gc_after``,
    within 1 s to 60 s (a released name goes between ``gc_after`` and about ``gc_after``
    plus two of these later, on a client that keeps releasing)."""
    return min(60.0, max(1.0, gc_after / 10))


async def sweep(session: AsyncSession, kind_path: str, gc_after: float, cursor: int) -> int:
    """One pass over the names under ``kind_path`` from ``cursor`` (module docstring): the
    cursor for the next pass."""
    try:
        names: list[str] = sorted(await session.call("get_children", kind_path))
    except NoNodeError:
        return 0
    if cursor >= len(names):
        cursor = 0
    batch = [f"{kind_path}/{name}" for name in names[cursor:cursor + SWEEP_BATCH]]
    if not batch:
        return 0
    answers: Sequence[Any] = await session.call_many("get", [(path,) for path in batch])
    now = await session.server_now()
    steps: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []
    for path, answer in zip(batch, answers, strict=True):
        if isinstance(answer, Exception):
            continue
        data, stat = answer
        if stat.numChildren:
            continue
        if stat.pzxid > stat.mzxid:
            steps.append(("set", (path, data), {"version": stat.version}))
        elif now - stat.mtime >= gc_after * 1000:
            steps.append(("delete", (path,), {"version": stat.version}))
    if steps:
        # Each step's refusal (a write or a child that came between: BadVersion, NotEmpty;
        # another pass's delete: NoNode) is its answer, not a failure.
        await session.call_together(steps)
    return cursor + len(batch)
