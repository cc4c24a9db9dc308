"""Leader election: the leader is the holder of a lock lease on the election's name, its term
the lease's fence, its value stored in the lease record. Runs on every backend that stores
lease values; ``tests/unit/test_capabilities.py`` checks the others refuse elections."""

from __future__ import annotations

import contextlib
import functools
import os

import pytest

import tenure
from tests.conformance import async_helpers as helpers
from tests.timing import scaled

PRIMITIVE = "election"


async def test_campaign_leader_resign(backend_url: str, name: str) -> None:
    async with tenure.connect_async(backend_url) as locks:
        election = locks.election(name, ttl=10)
        assert await election.leader() is None
        leadership = await election.campaign(value="host-a:8080")
        assert isinstance(leadership.term, int) and leadership.term >= 1
        leader = await election.leader()
        assert leader is not None
        assert (leader.value, leader.term) == ("host-a:8080", leadership.term)
        assert leader.holder.pid == os.getpid()
        leadership.check()
        await leadership.resign()
        assert await election.leader() is None


async def test_proclaim_replaces_the_value_in_the_same_term(backend_url: str, name: str) -> None:
    async with tenure.connect_async(backend_url) as locks:
        election = locks.election(name, ttl=10)
        leadership = await election.campaign(value="one")
        await leadership.proclaim("two")
        leader = await election.leader()
        assert leader is not None
        assert (leader.value, leader.term) == ("two", leadership.term)
        await leadership.resign()


async def test_terms_strictly_increase(backend_url: str, name: str) -> None:
    async with tenure.connect_async(backend_url) as locks:
        election = locks.election(name, ttl=10)
        terms = []
        for round_number in range(4):
            leadership = await election.campaign(value=f"round-{round_number}")
            assert leadership.term is not None
            terms.append(leadership.term)
            await leadership.resign()
        assert terms == sorted(set(terms))


async def test_timed_out_campaign_leaves_nothing(backend_url: str, name: str) -> None:
    async with tenure.connect_async(backend_url) as one, tenure.connect_async(backend_url) as two:
        leadership = await one.election(name, ttl=10).campaign(value="first")
        # The second client connects first (a ZooKeeper session can take longer to start on
        # a loaded machine than the 0.05 s + 0.5 s this campaign is given: ciB).
        assert await two.election(name).leader() is not None
        with pytest.raises(tenure.LockTimeout):
            await two.election(name, ttl=10).campaign(value="second", timeout=0.05)
        leader = await one.election(name).leader()
        assert leader is not None
        assert (leader.value, leader.term) == ("first", leadership.term)
        await leadership.resign()
        # The loser's attempt left no lease and no value behind.
        assert await two.election(name).leader() is None


async def test_one_leader_at_a_time(backend_url: str, name: str) -> None:
    async with tenure.connect_async(backend_url) as one, tenure.connect_async(backend_url) as two:
        first = await one.election(name, ttl=10).campaign(value="a")
        with pytest.raises(tenure.LockTimeout):
            await two.election(name, ttl=10).campaign(value="b", timeout=0.0)
        await first.resign()
        second = await two.election(name, ttl=10).campaign(value="b", timeout=5)
        assert second.term is not None and first.term is not None
        assert second.term > first.term
        await second.resign()


async def test_context_manager_resigns_on_exit(backend_url: str, name: str) -> None:
    async with tenure.connect_async(backend_url) as locks:
        election = locks.election(name, ttl=10)
        async with await election.campaign(value="x") as leadership:
            assert leadership.term is not None
            assert await election.leader() is not None
        assert await election.leader() is None


async def test_loss_is_signalled(backend_url: str, name: str) -> None:
    async with tenure.connect_async(backend_url) as locks:
        election = locks.election(name, ttl=10)
        leadership = await election.campaign(value="x")
        assert await locks.break_lock(name) is True
        with pytest.raises(tenure.LockLost):
            await leadership.proclaim("y")
        assert leadership.lost.is_set()
        with pytest.raises(tenure.LockLost):
            leadership.check()


async def test_observe_reports_every_change_in_order(backend_url: str, name: str) -> None:
    async with tenure.connect_async(backend_url) as locks:
        election = locks.election(name, ttl=10)
        observed = election.observe(interval=0.01)
        assert await anext(observed) is None
        first = await election.campaign(value="a")
        seen = await anext(observed)
        assert seen is not None and (seen.value, seen.term) == ("a", first.term)
        await first.proclaim("a2")
        seen = await anext(observed)
        assert seen is not None and (seen.value, seen.term) == ("a2", first.term)
        await first.resign()
        # The next term starts before the observer reads again: the gap is still reported.
        second = await election.campaign(value="b")
        assert await anext(observed) is None
        seen = await anext(observed)
        assert seen is not None and (seen.value, seen.term) == ("b", second.term)
        await second.resign()
        assert await anext(observed) is None
        await observed.aclose()


async def test_a_watching_observer_takes_nothing_from_the_candidates(
    backend_url: str, name: str
) -> None:
    """An observer waits for a change while a candidate campaigns: its waits take no lease
    and no wake-up (on Redis they once pipelined an acquire as "observer", which then led:
    no candidate was elected while ``tenure leader --watch`` ran). Either way the observer
    sees a change, so nothing here can hang: the campaign's own term, or the stolen one."""
    async with tenure.connect_async(backend_url) as locks:
        election = locks.election(name, ttl=10)
        observed = election.observe(interval=0.01)
        assert await anext(observed) is None

        async def next_change() -> tenure.Leader | None:
            return await anext(observed)

        async def campaign() -> tenure.AsyncLeadership:
            await helpers.sleep(0.2)  # the observer is in its waits
            return await election.campaign(value="a", timeout=scaled(5))

        seen, leadership = await helpers.gather(next_change, campaign)
        assert seen is not None and (seen.value, seen.term) == ("a", leadership.term)
        await leadership.resign()
        await observed.aclose()


async def test_bad_values_are_refused(backend_url: str, name: str) -> None:
    async with tenure.connect_async(backend_url) as locks:
        election = locks.election(name, ttl=10)
        with pytest.raises(tenure.InvalidArgumentType):
            await election.campaign(value=42)  # type: ignore[arg-type]
        with pytest.raises(tenure.InvalidArgument):
            await election.campaign(value="x" * 5000)
        assert await election.leader() is None


async def test_listing_shows_the_leader_value(backend_url: str, name: str) -> None:
    async with tenure.connect_async(backend_url) as locks:
        leadership = await locks.election(name, ttl=10).campaign(value="host-a:8080")
        info = await locks.inspect(name)
        assert info is not None and info.value == "host-a:8080"
        await leadership.resign()
        info = await locks.inspect(name)
        assert info is not None and info.value is None


async def test_a_candidate_campaigns_when_entered(backend_url: str, name: str) -> None:
    async with tenure.connect_async(backend_url) as locks:
        election = locks.election(name, ttl=10)
        candidate = election.candidate("c")
        with pytest.raises(tenure.NotOwned):  # no term before it wins: term is an int
            _ = candidate.term
        assert await election.leader() is None
        async with candidate as leadership:
            leader = await election.leader()
            assert leader is not None and (leader.value, leader.term) == ("c", leadership.term)
        assert await election.leader() is None


async def test_a_proclaim_racing_the_resign_is_neither_a_loss_nor_left_behind(
    backend_url: str, name: str
) -> None:
    """A proclaim out at the moment the leader resigns: whichever lands first, the resign is
    not a loss, a proclaim that lands second reports the resign (NotOwned), and the name
    is left with no leader."""

    async def proclaim_unless_resigned(leadership: tenure.AsyncLeadership) -> None:
        with contextlib.suppress(tenure.NotOwned):
            await leadership.proclaim("late")

    async with tenure.connect_async(backend_url) as locks:
        election = locks.election(name, ttl=30)
        for round_number in range(5):
            leadership = await election.campaign(value=f"round-{round_number}")
            await helpers.gather(functools.partial(proclaim_unless_resigned, leadership),
                                 leadership.resign)
            assert not leadership.lost.is_set()
            assert await election.leader() is None
