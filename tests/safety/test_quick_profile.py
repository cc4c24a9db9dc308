"""The quick profile of the safety harness (issue 7) on every backend, in the normal test run.

The same scenarios and checker as ``python -m safety run --profile full`` (see
docs/safety-method.md), with smaller counts. Each test runs only on the backends its scenario
applies to: where one does not apply (no server to restart, no connection to cut, no store
shared between processes), no test is generated; docs/safety.md says why.
"""

from __future__ import annotations

import contextlib
import pathlib
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import pytest
from safety.control import Target
from safety.scenarios import (
    PROFILES,
    WEIGHTED_LIMIT,
    WEIGHTS,
    Result,
    applicable,
    run_scenario,
    traits,
)

from safety import servers
from tests.backends import NAMES

pytestmark = pytest.mark.slow

QUICK = PROFILES["quick"]
F = TypeVar("F", bound=Callable[..., Any])


def scenario(key: str) -> Callable[[F], F]:
    """Generate the test only for the backends scenario ``key`` applies to (the backend
    table's ``pytest_generate_tests`` reads ``backends``)."""

    def mark(test: F) -> F:
        # The harness starts servers for every backend of the table (tests/backends.py).
        test.backends = applicable(key, list(NAMES))  # type: ignore[attr-defined]
        return test

    return mark


def run(key: str, target: Target, tmp_path: pathlib.Path) -> list[Result]:
    results = run_scenario(key, target, QUICK, tmp_path / key)
    for result in results:
        assert result.violations == [], (result.label, result.violations, result.details)
    return results


@scenario("baseline")
def test_baseline_has_no_overlapping_sections(
    backend_url: str, backend_name: str, tmp_path: pathlib.Path
) -> None:
    [result] = run("baseline", Target(backend_name, backend_url), tmp_path)
    assert result.sections == QUICK.baseline_sections
    assert result.overlaps == 0
    assert result.details["fence_regressions"] == 0
    # tenure verify's checker read every section's acquire and release, and found an order.
    assert result.details["linearizable"].startswith(
        f"linearizable: {2 * QUICK.baseline_sections} operations"), result.details


@scenario("lost-updates")
def test_read_sleep_write_loses_no_update(
    backend_url: str, backend_name: str, tmp_path: pathlib.Path
) -> None:
    [result] = run("lost-updates", Target(backend_name, backend_url), tmp_path)
    assert result.overlaps == 0
    assert result.details["final_value"] == result.details["writes_accepted"]
    assert result.details["writes_accepted"] == QUICK.counter_sections
    assert result.details["linearizable"].startswith(
        f"linearizable: {2 * QUICK.counter_sections} operations"), result.details


@scenario("paused")
def test_paused_holder_overlaps_but_fence_check_rejects_stale_writes(
    backend_url: str, backend_name: str, tmp_path: pathlib.Path
) -> None:
    lease_only, fenced = run("paused", Target(backend_name, backend_url), tmp_path)
    # The lease alone cannot prevent the overlap: the harness must see it, and report it.
    assert lease_only.overlaps and fenced.overlaps
    assert lease_only.details["silent_overlaps"] == fenced.details["silent_overlaps"] == 0
    assert fenced.stale_writes_accepted == 0
    assert fenced.details["stale_writes_refused"] >= 1
    assert fenced.details["victims_told_of_loss"] == QUICK.pause_trials


@scenario("killed")
def test_killed_holder_is_replaced_within_the_bound(
    backend_url: str, backend_name: str, tmp_path: pathlib.Path
) -> None:
    [result] = run("killed", Target(backend_name, backend_url), tmp_path)
    assert result.runs == QUICK.kill_trials
    # An overlap is a holder whose renewal a loaded machine delayed past its lease, taken by
    # the waiter before the kill: it must have been told.
    assert result.details["silent_overlaps"] == 0
    assert result.passed, result.violations
    assert result.worst_recovery is not None and result.recovery_bound is not None
    assert result.worst_recovery <= result.recovery_bound


@contextlib.contextmanager
def restartable(request: pytest.FixtureRequest, backend: str, variant: str,
                workdir: pathlib.Path) -> Iterator[Target]:
    """A server of this test's own: the backend's ``restartable_<backend>`` fixture where its
    server module has one, else the harness's own start (tests/servers functions too)."""
    if not variant:
        try:
            server = request.getfixturevalue(f"restartable_{backend}")
        except pytest.FixtureLookupError:
            pass
        else:
            yield Target(backend, server.url, server)
            return
    with servers.Servers(workdir) as started, started.restartable(backend, variant) as target:
        yield target


@scenario("restart")
def test_restarted_server_keeps_fences_and_tells_holders(
    backend_url: str, backend_name: str, tmp_path: pathlib.Path, request: pytest.FixtureRequest
) -> None:
    # Where the promise depends on the server's configuration (Redis persistence), each.
    for number, variant in enumerate(servers.restart_variants(backend_name)):
        workdir = tmp_path / str(number)
        with restartable(request, backend_name, variant, workdir) as target:
            [result] = run("restart", target, workdir)
        assert result.runs == QUICK.restart_trials
        assert result.details["silent_overlaps"] == 0
        verdict = result.details["linearizable"]
        if not (result.details["fences_promised_to_survive"]
                and result.details["leases_may_survive_restart"]) and (
                result.details["takeovers_inside_a_ttl"]):
            # The restart wiped the leases and a waiter was granted the lock inside its
            # holder's ttl: no order of one lease store explains what the clients saw.
            assert verdict.startswith("not linearizable: "), result.details
        # Whether a restart without persistence is taken over inside a ttl depends on how
        # soon the server and the waiters run again (ciB, at a load of 10: no takeover in
        # any trial), so the verdict is required only where a takeover was counted; that
        # the checker catches a Redis losing its data every time is tenure verify's own
        # test (test_verify_backends.py::test_redis_losing_its_data_is_caught).


@scenario("cut")
def test_cut_connection_sets_lost_and_no_call_hangs(
    backend_url: str, backend_name: str, tmp_path: pathlib.Path
) -> None:
    for result in run("cut", Target(backend_name, backend_url), tmp_path):
        assert result.overlaps == 0
        if result.recovery_bound is None:  # a quorum's minority cut: the lease must survive
            assert result.worst_recovery is None
            continue
        assert result.worst_recovery is not None
        assert result.worst_recovery <= result.recovery_bound  # lost was set, in time


@scenario("cancel")
def test_cancelled_and_timed_out_acquires_leave_nothing_behind(
    backend_url: str, backend_name: str, tmp_path: pathlib.Path
) -> None:
    [result] = run("cancel", Target(backend_name, backend_url), tmp_path)
    assert result.runs == QUICK.cancel_count
    assert result.details["held_after_3_ttl"] == []
    assert result.details["renewer_tasks_after_3_ttl"] == 0
    assert result.details["renewer_threads_after_3_ttl"] == 0


@scenario("race")
def test_exactly_one_winner_per_round(
    backend_url: str, backend_name: str, tmp_path: pathlib.Path
) -> None:
    [result] = run("race", Target(backend_name, backend_url), tmp_path)
    assert result.runs == QUICK.race_rounds
    assert result.details["rounds_with_several_winners"] == 0
    if traits(backend_name).split_votes is None:
        assert result.details["rounds_without_a_winner"] == 0
    assert result.passed, result.violations


@scenario("fuzz")
def test_hostile_names_and_wrong_arguments(
    backend_url: str, backend_name: str, tmp_path: pathlib.Path
) -> None:
    [result] = run("fuzz", Target(backend_name, backend_url), tmp_path)
    assert result.runs >= QUICK.fuzz_examples
    assert result.details["left_held"] == []


@scenario("clock")
def test_clock_jumps_end_leases_only_where_that_clock_judges_them(
    backend_url: str, backend_name: str, tmp_path: pathlib.Path
) -> None:
    variants = servers.clock_variants(backend_name)
    assert variants
    with servers.Servers(tmp_path) as started:
        for number, variant in enumerate(variants):
            with started.clocked(backend_name, variant,
                                 Target(backend_name, backend_url)) as target:
                assert target.clock is not None
                [result] = run("clock", target, tmp_path / str(number))
            assert result.runs == QUICK.clock_trials
            assert result.details["silent_overlaps"] == 0
            assert result.stale_writes_accepted == 0
            if target.clock.setup.ends_leases:  # the holder was told, and its write refused
                assert result.overlaps
                assert result.details["victims_told_of_loss"] == QUICK.clock_trials
                assert result.details["stale_writes_refused"] >= 1
            else:
                assert result.overlaps == 0
                assert result.details["victims_told_of_loss"] == 0


@scenario("nodes")
def test_a_stopped_node_of_three_neither_stops_nor_breaks_the_lock(
    backend_url: str, backend_name: str, tmp_path: pathlib.Path
) -> None:
    # A dedicated ensemble: its nodes are stopped and started again.
    with servers.Servers(tmp_path) as started:
        target = started.target(backend_name)
        results = run("nodes", target, tmp_path / "nodes")
    assert [r.variant for r in results] == ["the follower, SIGKILL", "the leader, SIGKILL"]
    for result in results:
        assert result.overlaps == 0
        assert result.details["lost_updates"] == 0
        assert result.details["fence_regressions"] == 0
        assert result.details["sections_after_the_stop"] > 0


@scenario("semaphore")
def test_a_semaphore_never_exceeds_its_limit_paused_or_killed(
    backend_url: str, backend_name: str, tmp_path: pathlib.Path
) -> None:
    baseline, paused, killed = run("semaphore", Target(backend_name, backend_url), tmp_path)
    assert baseline.sections == QUICK.semaphore_sections
    assert baseline.overlaps == 0
    assert baseline.details["most_at_once"] == 2
    assert baseline.details["fence_regressions"] == 0
    assert baseline.details["linearizable"].startswith(
        f"linearizable: {2 * QUICK.semaphore_sections} operations"), baseline.details
    # The paused holder's permit went to another: three at once, and it was told.
    assert paused.overlaps
    assert paused.details["victims_told_of_loss"] == QUICK.semaphore_pause_trials
    assert paused.details["silent_overlaps"] == 0
    assert killed.runs == QUICK.semaphore_kill_trials
    # An overlap here is a holder whose renewal a loaded machine delayed past its lease: it
    # must have been told (scenario 4's rule).
    assert killed.details["silent_overlaps"] == 0
    assert killed.worst_recovery is not None and killed.recovery_bound is not None
    assert killed.worst_recovery <= killed.recovery_bound


@scenario("failover")
def test_a_sentinel_failover_tells_every_holder_and_keeps_fences(
    backend_url: str, backend_name: str, tmp_path: pathlib.Path
) -> None:
    # A Sentinel set-up of its own (a primary, a replica, three sentinels): its primary dies.
    with servers.Servers(tmp_path) as started, started.failover(backend_name) as target:
        [result] = run("failover", target, tmp_path / "failover")
    assert result.runs == QUICK.failover_trials
    # What holds today: every holder whose lease did not survive is told, the clients reach
    # the promoted master and the lock is granted again. Fences that go back (a grant the
    # replica had not received when its primary died) are the scenario's own verdict in the
    # safety record, a known failure until fences have a floor from the server's clock
    # (issue 14): asserted here, they would fail at random, by where the kill lands.
    assert result.details["silent_overlaps"] == 0
    assert result.details["sections_spanning_a_failover"] == QUICK.failover_trials
    assert result.worst_recovery is not None


@scenario("cleanup")
def test_fences_never_go_back_when_idle_records_are_cleaned_up(
    backend_url: str, backend_name: str, tmp_path: pathlib.Path
) -> None:
    [result] = run("cleanup", Target(backend_name, backend_url), tmp_path)
    assert result.sections == QUICK.cleanup_sections
    assert result.overlaps == 0
    assert result.details["fence_regressions"] == 0
    assert result.details["records_removed_seen"] > 0


@scenario("rwlock")
def test_a_rwlock_shares_reads_never_a_write_paused_or_killed(
    backend_url: str, backend_name: str, tmp_path: pathlib.Path
) -> None:
    baseline, paused, killed = run("rwlock", Target(backend_name, backend_url), tmp_path)
    assert baseline.sections == QUICK.rwlock_sections
    # Mode-aware: only pairs with a write in them count; readers did share the lock.
    assert baseline.overlaps == 0
    assert baseline.details["most_readers_at_once"] >= 2
    assert baseline.details["fence_regressions"] == 0
    assert baseline.details["write_fence_regressions"] == 0
    # tenure verify's read-write lock model: every read and write section's acquire and
    # release, in one order of one store (readers sharing, a writer alone, fences rising).
    assert baseline.details["linearizable"].startswith(
        f"linearizable: {2 * QUICK.rwlock_sections} operations"), baseline.details
    assert baseline.worst_recovery is not None and baseline.recovery_bound is not None
    assert baseline.worst_recovery <= baseline.recovery_bound  # no writer starved
    # The paused writer's lock went to another, and the writer was told.
    assert paused.overlaps
    assert paused.details["victims_told_of_loss"] == QUICK.rwlock_pause_trials
    assert paused.details["silent_overlaps"] == 0
    assert killed.runs == QUICK.rwlock_kill_trials
    assert killed.details["silent_overlaps"] == 0
    assert killed.worst_recovery is not None and killed.recovery_bound is not None
    assert killed.worst_recovery <= killed.recovery_bound


@scenario("election")
def test_an_election_never_has_two_leaders_untold_paused_or_killed(
    backend_url: str, backend_name: str, tmp_path: pathlib.Path
) -> None:
    baseline, paused, killed = run("election", Target(backend_name, backend_url), tmp_path)
    assert baseline.sections == QUICK.election_terms
    assert baseline.overlaps == 0
    assert baseline.details["fence_regressions"] == baseline.details["term_regressions"] == 0
    # tenure verify's election model: campaigns won and resigned, terms rising.
    assert baseline.details["linearizable"].startswith(
        f"linearizable: {2 * QUICK.election_terms} operations"), baseline.details
    # The paused leader was succeeded during its pause, and told on resuming.
    assert paused.overlaps
    assert paused.details["victims_told_of_loss"] == QUICK.election_pause_trials
    assert paused.details["silent_overlaps"] == 0
    assert killed.runs == QUICK.election_kill_trials
    assert killed.details["silent_overlaps"] == 0
    assert killed.worst_recovery is not None and killed.recovery_bound is not None
    assert killed.worst_recovery <= killed.recovery_bound


@scenario("weighted")
def test_weighted_permits_never_exceed_the_units_baseline_or_killed(
    backend_url: str, backend_name: str, tmp_path: pathlib.Path
) -> None:
    # Generated only where the backend's store offers "weighted" (supports("weighted")).
    results = run("weighted", Target(backend_name, backend_url), tmp_path)
    limit = WEIGHTED_LIMIT
    baseline = results[0]
    assert baseline.sections == QUICK.weighted_sections
    # From the recorded intervals: the weights of the sections in progress never above 8...
    assert baseline.overlaps == 0
    assert baseline.details["most_units_at_once"] <= limit
    # ... and the limit did refuse permits: a permit of the heaviest weight could not fit.
    assert baseline.details["most_units_at_once"] > limit - max(WEIGHTS)
    assert baseline.details["fence_regressions"] == 0
    assert baseline.details["acquire_timeouts"] == 0  # no permit starved
    # tenure verify's checker has no weights: weighted permits are not given to it.
    assert "linearizable" not in baseline.details
    if traits(backend_name).shared is not None:
        # A store in its process (memory://): the contenders were threads of one process,
        # and no holder can be killed without its store.
        assert baseline.details["threads_each"] == QUICK.weighted_processes
        assert [r.variant for r in results] == ["baseline"]
        return
    _, killed = results
    assert killed.runs == QUICK.weighted_kill_trials
    # The killed holder's 3 units beside the fillers' 5: the limit was held all along, and
    # only the killed holder's units, back after its ttl, let the waiter of 3 in. An overlap
    # is a holder whose renewal a loaded machine delayed past its lease: told (scenario 4).
    assert killed.details["most_units_at_once"] >= limit
    assert killed.details["silent_overlaps"] == 0
    assert killed.details["fence_regressions"] == 0
    assert killed.worst_recovery is not None and killed.recovery_bound is not None
    assert killed.worst_recovery <= killed.recovery_bound
