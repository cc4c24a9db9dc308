"""memory://: idle records are removed after gc_after, never while a lease or a waiting place
is live, with bounded work per write; fences never go back, across clean-up and a lost store.

The store is the real one, driven by a fake monotonic clock (expiry and clean-up) so that
each step is exact; the fence floor is the real wall clock unless a test says otherwise.
"""

from __future__ import annotations

import pytest

import tenure
from tenure._options import DEFAULT_GC_AFTER
from tenure._types import Busy, Grant, Holder, Kind, LeaseSpec, Mode, Renewal
from tenure.backends.memory._server import SWEEP_LIMIT, MemoryServer
from tenure.backends.memory._sync import MemoryBackend
from tests.unit.test_state_machine import FakeClock

HOLDER = Holder("h", 1, "t")
LOCK = LeaseSpec()
GC = 0.3


def backend(gc_after: float | None = GC, store: MemoryServer | None = None,
            clock: FakeClock | None = None) -> tuple[MemoryBackend, FakeClock]:
    clock = clock or FakeClock()
    return MemoryBackend(store or MemoryServer(clock), gc_after=gc_after), clock


def permits(limit: int) -> LeaseSpec:
    return LeaseSpec(Kind.SEMAPHORE, limit=limit)


def queued(mode: Mode, queue_ttl: float) -> LeaseSpec:
    return LeaseSpec(Kind.RWLOCK, mode=mode, queue_ttl=queue_ttl)


def granted(outcome: Grant | Busy) -> int:
    assert isinstance(outcome, Grant), outcome
    return outcome.fence


def poke(memory: MemoryBackend) -> None:
    """One acquire of another name: clean-up runs on acquires."""
    memory.acquire("poke", LOCK, "poke", 0.001, HOLDER)


def test_an_idle_lock_record_goes_after_gc_after_and_fences_still_grow() -> None:
    memory, clock = backend()
    first = granted(memory.acquire("a", LOCK, "t1", 5.0, HOLDER))
    assert memory.release(Kind.LOCK, "a", "t1")
    second = granted(memory.acquire("a", LOCK, "t2", 5.0, HOLDER))
    assert second > first
    assert memory.release(Kind.LOCK, "a", "t2")
    clock.now += GC - 0.01
    poke(memory)
    assert memory.inspect(Kind.LOCK, "a") is not None  # not idle for gc_after yet
    clock.now += 0.02
    poke(memory)
    assert memory.inspect(Kind.LOCK, "a") is None and memory.list_records(Kind.LOCK, "a") == []
    third = granted(memory.acquire("a", LOCK, "t3", 5.0, HOLDER))
    assert third > second


def test_gc_after_counts_from_the_end_of_the_lease_not_the_grant() -> None:
    memory, clock = backend()
    fence = granted(memory.acquire("a", LOCK, "t1", 10.0, HOLDER))
    clock.now += 9.9  # far past gc_after, but the lease is live
    poke(memory)
    info = memory.inspect(Kind.LOCK, "a")
    assert info is not None and info.held and info.fence == fence
    assert memory.extend_many([Renewal("a", "t1", 10.0)]) == [True]
    clock.now += 9.9
    poke(memory)
    assert memory.owned(Kind.LOCK, "a", "t1")
    clock.now += 0.1 + GC - 0.01  # lease over, not yet gc_after
    poke(memory)
    assert memory.inspect(Kind.LOCK, "a") is not None
    clock.now += 0.02
    poke(memory)
    assert memory.inspect(Kind.LOCK, "a") is None


def test_a_semaphore_with_a_live_permit_is_kept() -> None:
    memory, clock = backend()
    first = granted(memory.acquire("s", permits(2), "long", 10.0, HOLDER))
    granted(memory.acquire("s", permits(2), "short", 0.1, HOLDER))
    assert memory.release(Kind.SEMAPHORE, "s", "short")
    clock.now += 5.0
    poke(memory)
    info = memory.inspect(Kind.SEMAPHORE, "s")
    assert info is not None and [lease.fence for lease in info.leases] == [first]
    assert memory.release(Kind.SEMAPHORE, "s", "long")
    last = info.fence
    clock.now += GC + 0.01
    poke(memory)
    assert memory.inspect(Kind.SEMAPHORE, "s") is None
    assert granted(memory.acquire("s", permits(3), "again", 1.0, HOLDER)) > last


def test_a_queue_with_a_lease_or_a_waiting_place_is_kept() -> None:
    memory, clock = backend()
    writer = granted(memory.acquire("q", queued(Mode.WRITE, 1.0), "w", 10.0, HOLDER))
    assert isinstance(
        memory.acquire("q", queued(Mode.READ, 20.0), "r", 1.0, HOLDER), Busy
    )
    assert memory.release(Kind.RWLOCK, "q", "w")
    clock.now += 15.0  # the writer is gone; the reader's place (20 s) is live, not granted
    poke(memory)
    info = memory.inspect(Kind.RWLOCK, "q")
    assert info is not None and info.queued == 1
    clock.now += 5.0 + GC + 0.01  # the place lapsed gc_after ago
    poke(memory)
    assert memory.inspect(Kind.RWLOCK, "q") is None
    again = granted(memory.acquire("q", queued(Mode.WRITE, 1.0), "w2", 1.0, HOLDER))
    assert again > writer


def test_gc_after_none_keeps_records_forever() -> None:
    memory, clock = backend(gc_after=None)
    fence = granted(memory.acquire("a", LOCK, "t", 1.0, HOLDER))
    assert memory.release(Kind.LOCK, "a", "t")
    granted(memory.acquire("s", permits(1), "t", 1.0, HOLDER))
    granted(memory.acquire("q", queued(Mode.READ, 1.0), "t", 1.0, HOLDER))
    clock.now += 10 * DEFAULT_GC_AFTER
    poke(memory)
    info = memory.inspect(Kind.LOCK, "a")
    assert info is not None and info.fence == fence
    assert memory.inspect(Kind.SEMAPHORE, "s") is not None
    assert memory.inspect(Kind.RWLOCK, "q") is not None


def test_the_last_writers_gc_after_applies() -> None:
    """Two connections to one named store: the record follows the one that wrote it last."""
    collecting, clock = backend(gc_after=GC)
    keeping, _ = backend(gc_after=None, store=collecting.server, clock=clock)
    granted(collecting.acquire("a", LOCK, "t", 1.0, HOLDER))
    assert keeping.release(Kind.LOCK, "a", "t")
    clock.now += 1.0 + GC
    poke(collecting)
    assert collecting.inspect(Kind.LOCK, "a") is not None
    granted(collecting.acquire("a", LOCK, "t2", 1.0, HOLDER))
    assert collecting.release(Kind.LOCK, "a", "t2")
    clock.now += GC + 0.01
    poke(collecting)
    assert collecting.inspect(Kind.LOCK, "a") is None


def test_a_lost_store_does_not_restart_fences() -> None:
    """A new process (or a fork's child) starts with an empty store: its fences are above the
    old store's, as they are floored by the wall clock."""
    old, _ = backend()
    before = granted(old.acquire("a", LOCK, "t", 1.0, HOLDER))
    new, _ = backend()
    assert granted(new.acquire("a", LOCK, "t", 1.0, HOLDER)) > before


def test_fences_still_increase_when_the_wall_clock_steps_back() -> None:
    clock = FakeClock()
    readings = iter([5_000_000, 4_000_000, 4_000_000, 10])
    memory, _ = backend(store=MemoryServer(clock, lambda: next(readings)), clock=clock)
    fences = []
    for token in ("a", "b", "c", "d"):
        fences.append(granted(memory.acquire("x", LOCK, token, 1.0, HOLDER)))
        assert memory.release(Kind.LOCK, "x", token)
    assert fences == [5_000_000, 5_000_001, 5_000_002, 5_000_003]
    # A retry by the holder keeps its fence (no clock read can change it).
    readings = iter([9_000_000])
    fence = granted(memory.acquire("x", LOCK, "e", 1.0, HOLDER))
    assert granted(memory.acquire("x", LOCK, "e", 1.0, HOLDER)) == fence == 9_000_000


def test_clean_up_work_per_write_is_bounded_and_keeps_up() -> None:
    memory, clock = backend()
    names = [f"n{i}" for i in range(1000)]
    for name in names:
        granted(memory.acquire(name, LOCK, "t", 0.01, HOLDER))
        assert memory.release(Kind.LOCK, name, "t")
    clock.now += 1.0
    memory.acquire("fresh", LOCK, "t", 5.0, HOLDER)
    # One write removed at most SWEEP_LIMIT idle records (and created one).
    assert len(memory.list_records(Kind.LOCK, "n")) == len(names) - SWEEP_LIMIT
    writes = 1
    while memory.list_records(Kind.LOCK, "n"):
        granted(memory.acquire("fresh", LOCK, "t", 5.0, HOLDER))  # a retry: the same lease
        writes += 1
    assert writes == -(-len(names) // SWEEP_LIMIT)
    assert [info.name for info in memory.list_records(Kind.LOCK, "")] == ["fresh"]


@pytest.mark.parametrize(
    ("url", "options"),
    [
        ("memory://?gc_after=0", {}),
        ("memory://?gc_after=-1", {}),
        ("memory://?gc_after=soon", {}),
        ("memory://?gc_after=inf", {}),
        ("memory://", {"gc_after": 0}),
        ("memory://", {"gc_after": True}),
        ("memory://", {"gc_after": "nan"}),
    ],
)
def test_bad_gc_after_is_a_configuration_error_naming_it(url: str, options: dict[str, object]
                                                         ) -> None:
    with pytest.raises(tenure.ConfigurationError, match="gc_after"):
        tenure.connect(url, **options)


def test_gc_after_from_the_url_or_a_keyword() -> None:
    with tenure.connect("memory://gc-option") as locks:
        assert isinstance(locks.backend, MemoryBackend)
        assert locks.backend.gc_after == DEFAULT_GC_AFTER
    with tenure.connect("memory://gc-option?gc_after=2.5") as locks:
        assert isinstance(locks.backend, MemoryBackend)
        assert locks.backend.gc_after == 2.5
    with tenure.connect("memory://gc-option?gc_after=2.5", gc_after="none") as locks:
        assert isinstance(locks.backend, MemoryBackend)
        assert locks.backend.gc_after is None  # the keyword wins
    with pytest.raises(tenure.ConfigurationError, match="colour"):
        tenure.connect("memory://?gc_after=1&colour=blue")


def test_a_retry_keeps_its_fence_only_while_its_lease_is_live() -> None:
    """The store contract: a token that holds a live lease gets it back with its fence; one
    whose lease lapsed is granted anew, above (a lock behaves here as a semaphore does)."""
    memory, clock = backend()
    for spec in (LOCK, permits(2)):
        fence = granted(memory.acquire("r", spec, "t", 1.0, HOLDER))
        assert granted(memory.acquire("r", spec, "t", 1.0, HOLDER)) == fence
        clock.now += 1.0
        assert granted(memory.acquire("r", spec, "t", 1.0, HOLDER)) > fence
