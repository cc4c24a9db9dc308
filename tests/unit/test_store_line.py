"""The narrow line's own rules (``tenure._async.store``), on a store written here: every verb
and attempt step a backend writes is wrapped once by the base, so that its driver's failures
leave as one BackendError form naming backend, action and lock; tenure's own errors and a
backend's bugs pass through untouched; what a store offers is data the client reads."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import pytest

import tenure
from tenure._async.lease import would_wait
from tenure._async.store import AsyncAttempt, AsyncStore
from tenure._types import (
    Busy,
    Capabilities,
    Grant,
    Holder,
    Kind,
    LeaseInfo,
    LeaseSpec,
    LockInfo,
    Mode,
    Renewal,
)

HOLDER = Holder("host", 1, "main")


class DriverDown(Exception):
    """What a driver raises when its server is gone."""


class Failing(AsyncStore):
    """Every verb fails the way its ``failure`` says (a driver error by default)."""

    schemes = ("failing",)
    capabilities = Capabilities(fencing="none", fences_survive_restart=False,
                                leases_survive_restart=False, wakeups="back-off",
                                multi_host=False, fault_tolerant=False)
    offers = frozenset({"lock", "semaphore"})
    refusals: ClassVar[Mapping[str, str]] = {
        "election": "this test store keeps no values, and says so at length"
    }
    driver_errors = (DriverDown,)

    def __init__(self, failure: BaseException | None = None) -> None:
        self.failure = failure if failure is not None else DriverDown("connection refused")

    @classmethod
    def from_url(cls, url: str, **options: Any) -> Failing:
        return cls()

    def describe(self) -> str:
        return "failing://127.0.0.1:1"

    def attempt(
        self, name: str, spec: LeaseSpec, token: str, ttl: float, holder: Holder
    ) -> AsyncAttempt:
        return Waiting(self, name, spec, token=token, ttl=ttl, holder=holder)

    async def acquire(
        self, name: str, spec: LeaseSpec, token: str, ttl: float, holder: Holder
    ) -> Grant | Busy:
        raise self.failure

    async def release(self, kind: Kind, name: str, token: str) -> bool:
        raise self.failure

    async def extend_many(self, renewals: Sequence[Renewal]) -> list[bool]:
        raise self.failure

    async def owned(self, kind: Kind, name: str, token: str) -> bool:
        raise self.failure

    async def inspect(self, kind: Kind, name: str) -> LockInfo | None:
        raise self.failure

    async def list_records(self, kind: Kind, prefix: str) -> list[LockInfo]:
        raise self.failure

    async def break_leases(self, kind: Kind, name: str) -> bool:
        raise self.failure

    async def aclose(self) -> None:
        raise self.failure


class Waiting(AsyncAttempt):
    store: Failing

    async def wait(self, timeout: float, busy: Busy) -> None:
        raise self.store.failure


class Subclassed(Failing):
    """A subclass that overrides a verb again: wrapped once more, never twice over."""

    async def release(self, kind: Kind, name: str, token: str) -> bool:
        return await super().release(kind, name, token)


class QuickFailing(Failing):
    """A store with a quick try of its own (``AsyncStore.quick_try``), failing as its verbs
    do."""

    async def quick_try(
        self, name: str, spec: LeaseSpec, token: str, ttl: float, holder: Holder
    ) -> Grant | None:
        raise self.failure


def run(coroutine: Any) -> Any:
    return asyncio.run(coroutine)


@pytest.mark.parametrize(("call", "action", "subject"), [
    (lambda s: s.acquire("job", LeaseSpec(), "t", 1.0, HOLDER), "acquire", "'job'"),
    (lambda s: s.release(Kind.LOCK, "job", "t"), "release", "'job'"),
    (lambda s: s.extend_many([Renewal("job", "t", 1.0), Renewal("b", "u", 1.0)]), "extend",
     "'job' and 1 more"),
    (lambda s: s.owned(Kind.SEMAPHORE, "job", "t"), "ownership check", "'job'"),
    (lambda s: s.inspect(Kind.RWLOCK, "job"), "inspect", "'job'"),
    (lambda s: s.list_records(Kind.LOCK, "jo"), "list", "the names under 'jo'"),
    (lambda s: s.break_leases(Kind.LOCK, "job"), "break", "'job'"),
    (lambda s: s.aclose(), "close", "the connections"),
])
def test_a_driver_error_leaves_every_verb_in_one_form(call: Any, action: str, subject: str) -> None:
    for store in (Failing(), Subclassed()):
        with pytest.raises(tenure.BackendError) as raised:
            run(call(store))
        assert str(raised.value) == (
            f"failing://127.0.0.1:1: {action} of {subject} failed: connection refused"
        )
        assert isinstance(raised.value.__cause__, DriverDown)


def test_an_attempts_steps_are_translated_too() -> None:
    attempt = Failing().attempt("job", LeaseSpec(), "t", 1.0, HOLDER)
    with pytest.raises(tenure.BackendError, match=r"^failing://127\.0\.0\.1:1: wait of 'job'"):
        run(attempt.wait(0.1, Busy(None)))
    with pytest.raises(tenure.BackendError, match=": acquire of 'job' failed"):
        run(attempt.try_once())


def test_a_quick_try_is_translated_and_known_only_where_a_store_has_its_own() -> None:
    # The lease logic asks only a store that has one: the default would answer None at once.
    assert QuickFailing.quick_tries and not Failing.quick_tries
    with pytest.raises(tenure.BackendError) as raised:
        run(QuickFailing().quick_try("job", LeaseSpec(), "t", 1.0, HOLDER))
    assert str(raised.value) == (
        "failing://127.0.0.1:1: acquire of 'job' failed: connection refused"
    )
    assert isinstance(raised.value.__cause__, DriverDown)


def test_tenure_errors_and_bugs_pass_through_untouched() -> None:
    mismatch = tenure.ConfigurationError("limit 2 asked, 3 stored")
    with pytest.raises(tenure.ConfigurationError) as raised:
        run(Failing(mismatch).acquire("job", LeaseSpec(), "t", 1.0, HOLDER))
    assert raised.value is mismatch
    # Not a driver failure: a bug of the backend's, which must not read as a server's.
    with pytest.raises(KeyError):
        run(Failing(KeyError("bug")).release(Kind.LOCK, "job", "t"))


def test_the_lease_logic_raises_the_stores_form() -> None:
    locks = tenure.AsyncLocks(Failing())

    async def acquire() -> None:
        await locks.lock("job", ttl=5).acquire(blocking=False)

    with pytest.raises(tenure.BackendError) as raised:
        run(acquire())
    assert str(raised.value).startswith("failing://127.0.0.1:1: acquire of 'job' failed")


def test_the_client_reads_what_a_store_offers_as_data() -> None:
    locks = tenure.AsyncLocks(Failing())
    assert [locks.supports(p) for p in ("lock", "semaphore", "election", "rwlock", "fair")] == [
        True, True, False, False, False
    ]
    with pytest.raises(tenure.ConfigurationError, match="no elections: this test store"):
        locks.election("e")
    with pytest.raises(tenure.ConfigurationError, match="no read-write locks: it is not impl"):
        locks.rwlock("r")
    with pytest.raises(tenure.ConfigurationError, match="no read-write locks"):
        run(locks.inspect("r", kind="rwlock"))


def _info(*modes: Mode | None, queued: int = 0, limit: int | None = None) -> LockInfo:
    leases = tuple(LeaseInfo(HOLDER, None, 1.0, 1, mode) for mode in modes)
    return LockInfo("n", 1, None, None, None, leases=leases, queued=queued, limit=limit)


def test_would_wait_is_each_kinds_rule_over_the_record() -> None:
    lock, write, read = LeaseSpec(), LeaseSpec(Kind.RWLOCK, mode=Mode.WRITE), LeaseSpec(
        Kind.RWLOCK, mode=Mode.READ)
    semaphore = LeaseSpec(Kind.SEMAPHORE, limit=2)
    assert not any(would_wait(spec, None) for spec in (lock, write, read, semaphore))
    assert would_wait(lock, _info(None)) and not would_wait(lock, _info())
    assert would_wait(semaphore, _info(None, None, limit=2))
    assert not would_wait(semaphore, _info(None, limit=2))
    assert would_wait(write, _info(Mode.READ)) and not would_wait(read, _info(Mode.READ))
    assert would_wait(read, _info(Mode.WRITE)) and would_wait(read, _info(queued=1))
