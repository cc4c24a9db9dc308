"""Ranking a node among its name's queue: which live nodes are ahead of it, judged by the
server's clock (``store.py``'s docstring, "Acquire, first try"), and whether they let it hold
(the rules of ``tenure.backends._ordered_queue``: the ``limit`` oldest, or by mode).

Each node counts until ``Record.counts_until``: a lock's waiter's node, queued, counts by its
queue ttl while a node ahead of it still exists, and as granted (by the ttl it asked for)
once it is the oldest node: the nodes ahead are read in one pipeline, oldest first, after
our own write, so a node is the oldest when every node listed ahead of it answered "gone"
(``_async/attempt.py``, "Granted from the queue", for why this is sound)."""

from __future__ import annotations

import dataclasses

from tenure._types import Mode
from tenure.backends.zookeeper._async.session import AsyncSession, entries
from tenure.backends.zookeeper._nodes import Record, mode_of, sequence_of

__all__ = ["Ranked", "rank"]


@dataclasses.dataclass
class Ranked:
    """The nodes ahead of ours, judged at the server time of our latest write."""

    live_ahead: list[Record]
    conflict: int | None
    writes_ahead: int = 0
    """How many of the live nodes ahead are a read-write lock's writers."""
    standing: list[str] = dataclasses.field(default_factory=list)
    """The nodes ahead not deleted by the ranking, oldest first."""

    def granted(self, limit: int, mode: str | None = None) -> bool:
        if mode == Mode.READ:
            return not self.writes_ahead
        if mode == Mode.WRITE:
            return not self.live_ahead
        return len(self.live_ahead) < limit


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
            # Judged as if not the oldest (nodes were listed ahead of it): a lock's waiter
            # that is in fact the oldest counts longer, which the full read below finds.
            if record.counts_until(nearest[1], oldest=False) >= now_ms:
                conflict = None if mode is not None or record.limit == limit else (
                    record.limit
                )
                return Ranked([record], conflict, standing=ahead)
    answers = await session.call_many("get", [(f"{parent}/{n}",) for n in ahead])
    live: list[Record] = []
    standing: list[str] = []
    writes = 0
    oldest = True  # no node read so far exists: the next one is the oldest left
    for node, answer in zip(ahead, answers, strict=True):
        if isinstance(answer, Exception):
            continue  # gone meanwhile
        data, stat = answer
        record = Record.decode(data)
        expired = record.counts_until(stat, oldest=oldest) < now_ms
        oldest = False
        if expired:
            if not await session.delete(f"{parent}/{node}", stat.version):
                # Rewritten since we judged it (its writer then finds its lapse and
                # deletes it): passed, but it may still be there to watch.
                standing.append(node)
            continue
        live.append(record)
        standing.append(node)
        writes += mode_of(node) == Mode.WRITE
    if mode is not None:
        return Ranked(live, None, writes, standing)  # no limit to disagree on
    conflict = next((r.limit for r in live[:limit] if r.limit != limit), None)
    return Ranked(live, conflict, standing=standing)

