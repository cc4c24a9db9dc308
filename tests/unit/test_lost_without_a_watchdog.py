"""docs/api.md: a lease nobody watches (``renew=False``, no ``on_lost``) starts no timer, so
its ``lost`` event stays unset after the ttl until the handle asks (``check()``, ``owned()``,
``extend()``, ``release()``); with ``on_lost`` it is set when the lease runs out."""

from __future__ import annotations

import time
import uuid

import pytest

import tenure

TTL = 0.2


@pytest.mark.parametrize("asks", ["check", "owned", "extend", "release"])
def test_lost_is_set_when_the_handle_asks(asks: str) -> None:
    with tenure.connect(f"memory://{uuid.uuid4().hex}") as locks:
        lock = locks.lock("k", ttl=TTL)
        assert lock.acquire()
        time.sleep(TTL * 3)  # well past the lease's end: nothing watches it
        assert not lock.lost.is_set()
        if asks == "owned":
            assert lock.owned() is False
        else:
            with pytest.raises(tenure.LockLost):
                getattr(lock, asks)()
        assert lock.lost.is_set()


def test_on_lost_sets_lost_at_the_lease_s_end_without_asking() -> None:
    with tenure.connect(f"memory://{uuid.uuid4().hex}") as locks:
        told: list[object] = []
        lock = locks.lock("k", ttl=TTL, on_lost=told.append)
        assert lock.acquire()
        assert lock.lost.wait(30)
        assert told == [lock]
