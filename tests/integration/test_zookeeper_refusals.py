"""A refused first try on ZooKeeper whose blocker leaves before the refusal's write lands
(``_async/refusal.py``): its node was, for that moment, in its turn, and everyone listing the
name saw it hold; the try must then answer granted, never "refused". ``tenure verify
--rwlock`` once failed on this: an ``inspect`` listed readers that no call was ever granted.

The blocker's release is made to land in that gap: just before the refusal's ``multi`` goes
out, the holder (another client, its own session) releases and the name is inspected. Real
3-node ensemble, real sessions; only the moment is chosen."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pytest

import tenure
from tenure.backends.zookeeper._sync.store import ZooKeeperBackend

pytestmark = pytest.mark.zookeeper

TTL = 30.0


def refused_while_the_blocker_leaves(
    zookeeper_url: str, monkeypatch: pytest.MonkeyPatch,
    blocker: Callable[[tenure.Locks], Any], contender: Callable[[tenure.Locks], Any],
    inspect: Callable[[tenure.Locks], tenure.LockInfo | None],
) -> tuple[bool, tenure.LockInfo | None, tenure.LockInfo | None]:
    """``blocker`` holds; ``contender``'s non-blocking try is refused, and the blocker is
    released just before the refusal's write. The try's answer, what ``inspect`` showed in
    that gap, and what it shows after the try."""
    with tenure.connect(zookeeper_url) as holding, tenure.connect(zookeeper_url) as trying:
        backend = trying.backend
        assert isinstance(backend, ZooKeeperBackend)
        session = backend.session
        held = blocker(holding)
        assert held.acquire(blocking=False)
        seen: list[tenure.LockInfo | None] = []

        def before_write(operation: str) -> None:
            """Just before the try's first write of a node that is not its create (the
            refusal's mark or delete, however it is sent): the blocker leaves."""
            if not seen and operation in ("set", "set_data", "delete"):
                held.release()
                seen.append(inspect(holding))

        commit, call_together, delete = session.commit, session.call_together, session.delete

        def committing(operations: Sequence[tuple[Any, ...]]) -> list[Any]:
            before_write(operations[-1][0])
            return commit(operations)

        def calling(calls: Sequence[tuple[str, tuple[Any, ...], dict[str, Any]]]) -> list[Any]:
            if calls:
                before_write(calls[0][0])
            return call_together(calls)

        def deleting(path: str, version: int = -1) -> bool:
            before_write("delete")
            return delete(path, version)

        monkeypatch.setattr(session, "commit", committing)
        monkeypatch.setattr(session, "call_together", calling)
        monkeypatch.setattr(session, "delete", deleting)
        handle = contender(trying)
        answer = bool(handle.acquire(blocking=False))
        monkeypatch.undo()
        assert seen, "the refusal's write never went out: the try was not refused"
        after = inspect(holding)
        if answer:
            handle.release()
        return answer, seen[0], after


def holders(info: tenure.LockInfo | None) -> list[str]:
    """What ``info`` shows holding: each lease's mode (a lock's or permit's: "held")."""
    assert info is not None
    return [lease.mode or "held" for lease in info.leases]


# (blocker, contender, kind inspected, what holds between the release and the refusal's
# write: the contender, in its turn)
GAPS = {
    "reader behind a writer": ("write", "read", "rwlock", ["read"]),
    "writer behind a writer": ("write", "write", "rwlock", ["write"]),
    "lock behind its holder": ("lock", "lock", "lock", ["held"]),
    "permit behind a permit": ("permit", "permit", "semaphore", ["held"]),
}


def lease(locks: tenure.Locks, name: str, what: str) -> Any:
    if what == "lock":
        return locks.lock(name, ttl=TTL)
    if what == "permit":
        return locks.semaphore(name, limit=1, ttl=TTL)
    rw = locks.rwlock(name, ttl=TTL)
    return rw.read() if what == "read" else rw.write()


@pytest.mark.parametrize("gap", list(GAPS))
def test_a_try_refused_as_its_blocker_leaves_is_granted(
    zookeeper_url: str, name: str, monkeypatch: pytest.MonkeyPatch, gap: str
) -> None:
    blocker, contender, kind, holding = GAPS[gap]
    answer, between, after = refused_while_the_blocker_leaves(
        zookeeper_url, monkeypatch,
        lambda locks: lease(locks, name, blocker),
        lambda locks: lease(locks, name, contender),
        lambda locks: locks.inspect(name, kind=kind),
    )
    assert holders(between) == holding  # in its turn, seen holding
    assert answer, f"a {contender} seen holding was told it was refused"
    assert holders(after) == holding


def test_a_refusal_whose_blocker_stands_is_clean(
    zookeeper_url: str, name: str
) -> None:
    """The common case is unchanged: the writer ahead stands, the reader is refused and
    leaves no node behind."""
    with tenure.connect(zookeeper_url) as holding, tenure.connect(zookeeper_url) as trying:
        writer = holding.rwlock(name, ttl=TTL).write()
        assert writer.acquire(blocking=False)
        assert not trying.rwlock(name, ttl=TTL).read().acquire(blocking=False)
        info = holding.inspect(name, kind="rwlock")
        assert info is not None and [lease.mode for lease in info.leases] == ["write"]
        assert not info.waiters
        writer.release()
