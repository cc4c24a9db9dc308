"""Ranking a node among its name's queue: which live nodes are ahead of it, judged by the
server's clock (``store.py``'s docstring, "Acquire, first try"), and whether they let it hold
(the rules of ``tenure.backends._ordered_queue``: the ``limit`` oldest, or by mode).

A semaphore's nodes each take their ``weight`` (1 for a lock's, and for a permit written by an
older tenure): a node is granted when the weights of the live nodes ahead of it, holders and
waiters alike, plus its own stay within the limit (with every weight 1: fewer than ``limit``
live nodes ahead). A newcomer's node is the newest, so it counts every live permit and place
there is, less the permits granted behind a place after it (they counted that place, in
turn); a waiter's counts the permits and places ahead of it. Why the units of the live
permits never exceed the limit: take the newest granted node; when it was granted, every
granted node now alive stood ahead of it, live (nodes only join behind, and one judged
lapsed never holds: ``attempt``'s docstring), and their weights plus its own were within the
limit; nodes have left since, none has joined ahead. A heavy waiter at the head holds back
every lighter node behind it, however much room is left: nobody is starved."""

from __future__ import annotations

import dataclasses

from tenure._types import Mode
from tenure.backends.zookeeper._async.session import AsyncSession, entries
from tenure.backends.zookeeper._nodes import Record, mode_of, sequence_of

__all__ = ["Ahead", "Ranked", "rank"]


@dataclasses.dataclass(frozen=True)
class Ahead:
    """A live node ahead of ours, as the ranking read it."""

    node: str
    version: int
    expires_ms: int
    """Its last write's ``mtime`` plus its ttl: live until then by the server's clock."""


@dataclasses.dataclass
class Ranked:
    """The nodes ahead of ours, judged at the server time of our latest write."""

    live_ahead: list[Record]
    conflict: int | None
    standing: list[str] = dataclasses.field(default_factory=list)
    """The nodes ahead not deleted by the ranking, oldest first."""
    read: list[Ahead] = dataclasses.field(default_factory=list)
    """The live nodes ahead as read, oldest first (a lock's or writer's ranking that found
    the nearest live reads only that one)."""

    @property
    def writes_ahead(self) -> int:
        """How many of the live nodes ahead are a read-write lock's writers."""
        return len(self._writers())

    def _writers(self) -> list[Ahead]:
        return [ahead for ahead in self.read if mode_of(ahead.node) == Mode.WRITE]

    def refusing(self, limit: int, mode: str | None = None) -> list[Ahead]:
        """The live nodes ahead that refuse ours while each stands, unchanged and live: the
        nearest (a writer's, a lock's), the newest writer (a reader's), every one (a
        permit's: their weights only grow back by leaving). Nodes join only behind, so
        while these stand nothing can let ours hold."""
        if mode == Mode.READ:
            return self._writers()[-1:]
        if mode == Mode.WRITE or limit == 1:
            return self.read[-1:]
        return list(self.read)

    def granted(self, limit: int, mode: str | None = None, weight: int = 1) -> bool:
        """Whether our node, of ``weight`` (a semaphore's permit), holds by the rule."""
        if mode == Mode.READ:
            return not self.writes_ahead
        if mode == Mode.WRITE:
            return not self.live_ahead
        return sum(record.weight for record in self.live_ahead) + weight <= limit


async def rank(
    session: AsyncSession, parent: str, path: str, now_ms: int, *, limit: int,
    mode: str | None = None, children: list[str] | None = None,
) -> Ranked:
    """The live nodes ahead of ``path`` (deleting those expired at ``now_ms``, the server
    time of our own latest write), and a limit they hold that differs from ours.
    ``children``: the name's nodes, listed after that write (None: list them now)."""
    ours = sequence_of(path)
    nodes = await session.children(parent) if children is None else entries(children)
    ahead = [node for node in nodes if sequence_of(node) < ours]
    if len(ahead) > 1 and (mode == Mode.WRITE or (mode is None and limit == 1)):
        # One live node ahead refuses us: the nearest is read first, and the others
        # only if it expired (each waiter judges the one ahead of it, in turn).
        (nearest,) = await session.call_many("get", [(f"{parent}/{ahead[-1]}",)])
        if not isinstance(nearest, Exception):
            record = Record.decode(nearest[0])
            if nearest[1].mtime + record.ttl_ms >= now_ms:
                conflict = None if mode is not None or record.limit == limit else (
                    record.limit
                )
                expires = nearest[1].mtime + record.ttl_ms
                return Ranked([record], conflict, standing=ahead,
                              read=[Ahead(ahead[-1], nearest[1].version, expires)])
    answers = await session.call_many("get", [(f"{parent}/{n}",) for n in ahead])
    live: list[Record] = []
    standing: list[str] = []
    read: list[Ahead] = []
    for node, answer in zip(ahead, answers, strict=True):
        if isinstance(answer, Exception):
            continue  # gone meanwhile
        data, stat = answer
        record = Record.decode(data)
        if stat.mtime + record.ttl_ms < now_ms:
            if not await session.delete(f"{parent}/{node}", stat.version):
                # Rewritten since we judged it (its writer then finds its lapse and
                # deletes it): passed, but it may still be there to watch.
                standing.append(node)
            continue
        live.append(record)
        standing.append(node)
        read.append(Ahead(node, stat.version, stat.mtime + record.ttl_ms))
    if mode is not None:
        return Ranked(live, None, standing, read)  # no limit to disagree on
    conflict = next((r.limit for r in live[:limit] if r.limit != limit), None)
    return Ranked(live, conflict, standing, read)

