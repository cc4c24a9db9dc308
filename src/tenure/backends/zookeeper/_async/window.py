"""ZooKeeper for asyncio: a release inside a lock's ``hold_at_least`` window
(``AsyncStore.release_after``), which must leave the name held until the window ends.

A holder's node is ephemeral: it goes with its session, and a scheduled job exits right
after it releases, so a node whose ttl was merely shortened would free the name at that
exit, long before the window's end. The release replaces it instead, in ONE multi, by a
persistent node at the same path (the same place in the queue: nodes only join behind)
holding the holder's record with the window as its ttl and the grant's fence:

    set_data(ours, version)  the server's time for the ttl rule, guarded by the version we
                             last wrote (a write of ours landing first fails it); it also
                             fires the watch of the waiter behind as CHANGED
    delete(ours)
    create(ours)             persistent; its record: ttl = the window, fence = our czxid

Everyone judges the new node as any node: live until its ``mtime`` (the multi's) plus the
window by the server's clock, then deleted, versioned, by the first contender that ranks
behind it (``ranking``). ``inspect`` shows it held by the same holder with the same fence:
its record's ``fence``, its own ``czxid`` being newer (``_records``). The waiter watching
our node hears the multi's set first (CHANGED), sets its watch again and finds the new node
(``attempt``): ZooKeeper fires a watch once, so the delete that follows is not taken for
"the node ahead is gone", which would grant it without looking.
"""

from __future__ import annotations

import dataclasses

from kazoo.exceptions import BadVersionError, NoNodeError

from tenure.backends.zookeeper._async.session import AsyncSession
from tenure.backends.zookeeper._leases import Held
from tenure.backends.zookeeper._nodes import Record

__all__ = ["hold_over"]


async def hold_over(session: AsyncSession, held: Held, seconds: float) -> bool:
    """Replace ``held``'s ephemeral node by a persistent one that keeps the name for
    ``seconds`` by the server's clock (module docstring); False if the lease had ended
    already (the node gone, or its last write older than its ttl by the multi's time)."""
    known = held.known()  # the write we know of; each conflict moves it on
    kept = dataclasses.replace(held.record, fence=held.fence).with_ttl(seconds)
    while True:
        stat, *_ = await session.commit([
            ("set_data", held.path, held.record.encode(), known.version),
            ("delete", held.path, -1),
            ("create", held.path, kept.encode()),
        ])
        if not isinstance(stat, Exception):
            break
        if isinstance(stat, NoNodeError):
            return False  # deleted as expired, broken, or with the session
        if not isinstance(stat, BadVersionError):
            raise stat
        # Only this process writes the node: a renewal or proclaim of ours landed first,
        # its answer not read yet. Judge it as its own answer will, then go again after it.
        try:
            data, latest = await session.call("get", held.path)
        except NoNodeError:
            return False
        if known.lapsed_before(latest.mtime):
            await session.delete(held.path, latest.version)
            return False
        known.wrote(latest, Record.decode(data).ttl_ms)
    if known.lapsed_before(stat.mtime):
        # The lease had run out before the release came: a contender may have passed it
        # already, so the new node must not stand in its way.
        await session.delete(held.path, 0)
        return False
    return True
