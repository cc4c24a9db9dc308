"""A refused first try's node, given up only while what refused it still stands.

A first try's node is created with the holder's record and ranked after (``store.join``), so
between its create and the write that ends its refusal (a read-write lock's rewrite as
``queued``; a lock's or permit's delete) it looks like any holder's node. If what was ahead of
it went in that gap (a release, a lease that lapsed), the node was, for that moment, in its
turn: ``inspect``, ``ls`` and every other contender saw it hold. A try that then answered
"refused" had been seen holding a lease it never got: ``tenure verify --rwlock`` found that
on ZooKeeper (an ``inspect`` listed readers that no call was ever granted, while a writer
was waiting behind them).

So the write that ends a refusal goes in one ``multi`` with a ``check`` of each node that
refused it (``Ranked.refusing``: the version the ranking read). Applied, each of those nodes
stood unchanged from before our create (it was in the list read after it; nodes only join
behind, and a sequential path is never made again) to that write; and live, if its expiry
(its last write plus its ttl, by the server's clock) is after that write. The write's server
time is known only once it is answered, so the expiry is compared with an upper bound of it
before sending: the create's server time plus the time since it was sent, by our clock. A
node that could lapse before the write lands (within ``NEAR_LAPSE_MS`` of that bound) is not
raced: the try waits for its expiry, then ranks again. A check that fails (the node went, or
was rewritten: a renewal) ranks again too. Nodes only leave ahead of ours, and one judged
lapsed stays lapsed, so a node that was ever in its turn still is when ranked again: that
ranking grants it, and the try answers granted, its node untouched (the holder's record of
its create). Otherwise the new ranking's refusing nodes are checked in turn.

Every refusal goes this way: a read-write lock's node marked as the waiter's place, a queued
permit's too when a wait follows (else deleted), a lock's deleted. A blocking lock's refused
node kept as its place (``holds_at_head``) needs none of it: once first it holds, as the
others see it, and its waiter takes that grant.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

from kazoo.exceptions import BadVersionError, NoNodeError, RolledBackError, RuntimeInconsistency

from tenure._concurrency import async_io as io
from tenure.backends.zookeeper._async.ranking import Ranked, rank
from tenure.backends.zookeeper._async.session import AsyncSession

__all__ = ["NEAR_LAPSE_MS", "Refused", "refuse"]

NEAR_LAPSE_MS = 250
"""A refusing node whose expiry is this close to the upper bound of the server's time (or
past it) may lapse before the refusal's write lands: the try waits for that expiry instead.
Room for a round trip and a pause of the server or of this process."""


@dataclasses.dataclass(frozen=True)
class Refused:
    """The refusal's write was applied while the nodes that refused ours stood."""

    answer: Any
    """The write's answer (``final``: a mark's stat, a delete's True), or ``None`` when our
    node went meanwhile (its session ended, or a contender passed it)."""
    ranked: Ranked
    """The ranking whose refusing nodes stood."""


async def refuse(
    session: AsyncSession, parent: str, path: str, ranked: Ranked, final: tuple[Any, ...], *,
    server_ms: int, sent: float, limit: int, mode: str | None, weight: int,
) -> Refused | Ranked:
    """Apply ``final`` (a ``multi`` operation on our node at ``path``) while the nodes that
    refused ours stand (module docstring); or, when one went and ours reached its turn, the
    ranking that grants it (``final`` not applied). ``server_ms``: a server time read at or
    after ``sent`` (our clock, ``time.monotonic``), the create's ``mtime``."""
    while True:
        refusing = ranked.refusing(limit, mode)
        bound = server_ms + (time.monotonic() - sent) * 1000
        soonest = min((ahead.expires_ms for ahead in refusing), default=None)
        if soonest is not None and soonest - bound < NEAR_LAPSE_MS:
            await io.sleep(max(0.0, soonest - bound) / 1000 + 0.001)
        else:
            answers = await session.commit([
                *(("check", f"{parent}/{ahead.node}", ahead.version) for ahead in refusing),
                final,
            ])
            if not isinstance(answers[-1], Exception):
                return Refused(answers[-1], ranked)
            index, failed = next(
                (i, a) for i, a in enumerate(answers) if isinstance(a, Exception)
                and not isinstance(a, (RolledBackError, RuntimeInconsistency))
            )
            if not isinstance(failed, (NoNodeError, BadVersionError)):
                raise failed
            if index == len(refusing):
                return Refused(None, ranked)  # our node went: nothing left to give up
            # A refusing node went or was rewritten (a renewal): rank again.
        sent = time.monotonic()
        server_ms = await session.server_now()
        ranked = await rank(session, parent, path, server_ms, limit=limit, mode=mode)
        if ranked.conflict is None and ranked.granted(limit, mode, weight):
            return ranked
