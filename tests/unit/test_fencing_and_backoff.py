from __future__ import annotations

import os
import random
import threading

import pytest

import tenure
from tenure._backoff import Backoff


def test_fence_guard_rejects_stale_fences_per_name() -> None:
    guard = tenure.FenceGuard()
    guard.check(3, "a")
    guard.check(3, "a")  # the same holder writing twice
    guard.check(1, "b")  # another name has its own order
    with pytest.raises(tenure.StaleFence) as raised:
        guard.check(2, "a")
    assert raised.value.latest == 3 and raised.value.fence == 2
    assert guard.accepts(4, "a") and not guard.accepts(3, "a")
    assert guard.latest("a") == 4
    with pytest.raises(tenure.InvalidArgumentType):
        guard.check("5", "a")  # type: ignore[arg-type]


def test_fence_guard_is_thread_safe() -> None:
    guard = tenure.FenceGuard()
    accepted: list[int] = []

    def write(fences: list[int]) -> None:
        for fence in fences:
            if guard.accepts(fence):
                accepted.append(fence)

    fences = list(range(1, 2001))
    random.Random(7).shuffle(fences)
    threads = [threading.Thread(target=write, args=(fences[i::4],)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert guard.latest() == 2000
    # Whatever interleaving: no accepted write was older than one accepted before it... per
    # the guard's own serial order, which we can't observe; but the newest must win.
    assert 2000 in accepted


def test_backoff_doubles_with_jitter_and_respects_holder_ttl() -> None:
    backoff = Backoff(maximum=0.1, initial=0.001, rng=random.Random(1))
    pauses = [backoff.next_pause(None) for _ in range(12)]
    assert all(0.0005 <= p <= 0.1 for p in pauses)
    assert pauses[-1] >= 0.05  # reached the cap's upper half
    assert max(pauses) <= 0.1
    bounded = Backoff(maximum=10.0, initial=5.0, rng=random.Random(1))
    assert bounded.next_pause(0.2) <= 0.2 + 0.001
    assert bounded.next_pause(-1.0) <= 0.001


def test_forked_children_draw_different_pauses() -> None:
    # A forked child starts with its parent's generator state: unless it is seeded again,
    # every worker of a fork pool retries in lock-step with the others.
    def pauses() -> list[float]:
        backoff = Backoff(maximum=1.0, initial=1.0)
        return [backoff.next_pause(None) for _ in range(4)]

    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - the child reports through the pipe, and never
        status = 1  # returns into the test session
        try:
            os.write(write, repr(pauses()).encode())
            status = 0
        finally:
            os._exit(status)
    os.close(write)
    _, status = os.waitpid(child, 0)
    with os.fdopen(read) as pipe:
        in_child = pipe.read()
    assert os.waitstatus_to_exitcode(status) == 0 and in_child.startswith("[")
    assert in_child != repr(pauses())
