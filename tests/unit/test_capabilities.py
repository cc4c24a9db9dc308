"""Every built-in backend either offers each primitive or refuses it with a reason, and the
refusal reaches the caller as a ConfigurationError naming the backend and the reason."""

from __future__ import annotations

import pytest

import tenure
from tenure._async.connect import store_class
from tenure._async.store import EVERY_PRIMITIVE
from tenure._registry import builtin_backends
from tenure._urls import load_backend_module
from tenure.backends.memory._server import MemoryServer
from tenure.backends.memory._sync import MemoryBackend

PACKAGES = sorted({entry.package for entry in builtin_backends().values()})


@pytest.mark.parametrize("package", PACKAGES)
def test_every_backend_offers_or_refuses_semaphores(package: str) -> None:
    scheme = next(s for s, entry in builtin_backends().items() if entry.package == package)
    backend = store_class(load_backend_module(f"{scheme}://", "_async").BACKEND)
    offered = "semaphore" in backend.offers
    refused = "semaphore" in backend.refusals
    assert offered != refused, (package, offered, refused)
    if refused:
        assert len(backend.refusals["semaphore"]) > 40  # a reason, not a word


@pytest.mark.parametrize("package", PACKAGES)
def test_weighted_permits_come_with_semaphores(package: str) -> None:
    scheme = next(s for s, entry in builtin_backends().items() if entry.package == package)
    backend = store_class(load_backend_module(f"{scheme}://", "_async").BACKEND)
    if "weighted" in backend.offers:
        assert "semaphore" in backend.offers, package
    # Every built-in store with semaphores queues weighted permits (Redlock has none).
    assert ("weighted" in backend.offers) == ("semaphore" in backend.offers), package


class Unweighted(MemoryBackend):
    """A store with semaphores and no weighted permits (a third-party backend may be so)."""

    offers = EVERY_PRIMITIVE


def test_a_weight_above_one_is_refused_naming_the_backend() -> None:
    with tenure.Locks(Unweighted(MemoryServer())) as locks:
        assert locks.supports("weighted") is False and locks.supports("semaphore") is True
        assert locks.semaphore("gpu", limit=8, weight=1).weight == 1
        with pytest.raises(tenure.ConfigurationError) as raised:
            locks.semaphore("gpu", limit=8, weight=2)
        message = str(raised.value)
        assert locks.backend.describe() in message and "weighted permits" in message
        # A bad weight is bad input first, on every backend.
        with pytest.raises(tenure.InvalidArgument, match="weight"):
            locks.semaphore("gpu", limit=8, weight=9)


def test_zookeeper_queues_weighted_permits() -> None:
    # Connecting is lazy: no server is needed for the handle, nor to say what it offers.
    with tenure.connect("zookeeper://127.0.0.1:1") as locks:
        assert locks.supports("weighted") is True
        heavy, light = (locks.semaphore("gpu", limit=8, weight=w) for w in (2, 1))
        assert heavy.weight == 2 and heavy.spec.queues and light.spec.queues


def test_redlock_refuses_semaphores_saying_why() -> None:
    # Connecting is lazy: no server is needed to be refused.
    with tenure.connect("redlock://127.0.0.1:1,127.0.0.1:2,127.0.0.1:3") as locks:
        assert locks.supports("semaphore") is False
        with pytest.raises(tenure.ConfigurationError) as raised:
            locks.semaphore("exports", limit=2)
        message = str(raised.value)
        assert "redlock://" in message and "majority" in message


def test_semaphore_arguments_are_checked() -> None:
    with tenure.connect("memory://") as locks:
        for bad in (0, -1, 2**31):
            with pytest.raises(tenure.InvalidArgument):
                locks.semaphore("s", limit=bad)
        for wrong in (1.5, "3", True, None):
            with pytest.raises(tenure.InvalidArgumentType):
                locks.semaphore("s", limit=wrong)  # type: ignore[arg-type]
        with pytest.raises(tenure.InvalidArgument):
            locks.semaphore("s", limit=2, max_renewals=3)
        with pytest.raises(tenure.InvalidArgument):
            locks.inspect("s", kind="barrier")
        assert locks.supports("semaphore") is True


@pytest.mark.parametrize("package", PACKAGES)
def test_each_backend_class_serves_the_schemes_its_package_declares(package: str) -> None:
    entry = next(e for e in builtin_backends().values() if e.package == package)
    for flavour in ("_async", "_sync"):
        backend = load_backend_module(f"{entry.schemes[0]}://", flavour).BACKEND
        assert backend.schemes == entry.schemes, (package, flavour)


def test_redlock_refuses_elections_saying_why() -> None:
    with tenure.connect("redlock://127.0.0.1:1,127.0.0.1:2,127.0.0.1:3") as locks:
        assert locks.supports("election") is False
        with pytest.raises(tenure.ConfigurationError) as raised:
            locks.election("scheduler")
        message = str(raised.value)
        assert "redlock://" in message and "elections" in message and "majority" in message


def test_election_arguments_are_checked() -> None:
    with tenure.connect("memory://elections-args") as locks:
        assert locks.supports("election") is True
        with pytest.raises(tenure.InvalidArgument):
            locks.election("")
        with pytest.raises(tenure.InvalidArgument):
            locks.election("scheduler", ttl=0)
        election = locks.election("scheduler", ttl=5)
        with pytest.raises(tenure.InvalidArgument):
            election.campaign(value="v", timeout=-1)
        assert election.leader() is None


def test_redlock_refuses_fair_and_read_write_locks_saying_why() -> None:
    with tenure.connect("redlock://127.0.0.1:1,127.0.0.1:2,127.0.0.1:3") as locks:
        assert locks.supports("fair") is False and locks.supports("rwlock") is False
        with pytest.raises(tenure.ConfigurationError) as raised:
            locks.lock("k", fair=True)
        message = str(raised.value)
        assert "redlock://" in message and "fair locks" in message
        assert "independent nodes order waiters differently: no single arrival order" in message
        with pytest.raises(tenure.ConfigurationError) as raised:
            locks.rwlock("k")
        assert "read-write locks" in str(raised.value) and "arrival order" in str(raised.value)
        with pytest.raises(tenure.ConfigurationError):
            locks.inspect("k", kind="rwlock")
        # The plain lock is untouched by the refusal.
        assert isinstance(locks.lock("k"), tenure.Lock)


@pytest.mark.parametrize("package", PACKAGES)
def test_queued_leases_are_offered_or_refused_with_a_reason(package: str) -> None:
    # A backend neither offering nor refusing has not built them yet: the guarantees table
    # says "not yet" and using them raises ConfigurationError saying it is not implemented.
    scheme = next(s for s, entry in builtin_backends().items() if entry.package == package)
    backend = store_class(load_backend_module(f"{scheme}://", "_async").BACKEND)
    for primitive in ("fair", "rwlock"):
        if primitive in backend.refusals:
            assert len(backend.refusals[primitive]) > 40  # a reason, not a word
    if "rwlock" in backend.offers or "fair" in backend.offers:
        # Offering read-write locks but refusing fair ones is possible; the reverse is not
        # (a fair lock is the write side of the read-write lock).
        assert "rwlock" not in backend.refusals or "fair" in backend.refusals


def test_fair_and_rwlock_arguments_are_checked() -> None:
    with tenure.connect("memory://queued-args") as locks:
        assert locks.supports("fair") and locks.supports("rwlock")
        fair = locks.lock("k", fair=True)
        assert isinstance(fair, tenure.Lock)
        with pytest.raises(tenure.InvalidArgumentType):
            locks.lock("k", fair=1)  # type: ignore[arg-type]
        with pytest.raises(tenure.InvalidArgument):
            locks.rwlock("")
        with pytest.raises(tenure.InvalidArgument):
            locks.rwlock("k", ttl=-1)
        with pytest.raises(tenure.InvalidArgument):
            locks.rwlock("k", max_renewals=2)
        rw = locks.rwlock("k", ttl=5)
        assert isinstance(rw, tenure.ReadWriteLock)
        with pytest.raises(tenure.InvalidArgument):
            rw.read(timeout=-1)
        with pytest.raises(tenure.InvalidArgumentType):
            rw.write(renew="yes")  # type: ignore[typeddict-item]
        assert rw.read(ttl=2).ttl == 2 and rw.write().ttl == 5
        assert rw.read() is not rw.read()  # non-reentrant: one handle per call
        nesting = locks.rwlock("k", reentrant=True)
        assert nesting.read() is nesting.read() and nesting.write() is nesting.write()
        with pytest.raises(tenure.InvalidArgument):
            locks.supports("barrier")
