"""The checker of the safety harness, on hand-made histories whose answers are known."""

from __future__ import annotations

import dataclasses

from safety.checker import (
    check,
    check_races,
    excess_moments,
    fence_regressions,
    most_units_at_once,
    overlapping_pairs,
    stale_writes,
    write_fence_regressions,
)
from safety.history import Access, Attempt, History, Section
from safety.linearizable import certain_overlaps, checked, operations


def section(worker: str, start: int, end: int, fence: int, *, name: str = "k",
            asked: int | None = None, lost: bool = False, release: str = "ok",
            mode: str | None = None, weight: int | None = None) -> Section:
    return Section(worker, start, name, start - 1 if asked is None else asked, start, end, fence,
                   lost=lost, release=release, mode=mode, weight=weight)


def test_back_to_back_sections_do_not_overlap() -> None:
    sections = [section("a", 10, 20, 1), section("b", 20, 30, 2), section("a", 31, 40, 3)]
    figures = check(History(sections=sections))
    assert figures.overlaps == figures.overlap_pairs == 0
    assert figures.fence_regressions == 0


def test_overlaps_are_counted_per_lock_and_per_section() -> None:
    sections = [
        section("victim", 0, 100, 1, lost=True),  # paused, told at the end
        section("b", 10, 20, 2),
        section("c", 30, 40, 3),
        section("d", 50, 60, 1, name="other"),  # another lock: no overlap with the rest
    ]
    figures = check(History(sections=sections))
    assert figures.overlap_pairs == 2
    assert figures.overlaps == 3
    assert figures.silent_overlaps == 0
    assert len(overlapping_pairs(sections)) == 2


def test_an_overlap_nobody_was_told_about_is_silent() -> None:
    figures = check(History(sections=[section("a", 0, 100, 1), section("b", 10, 20, 2)]))
    assert figures.silent_overlaps == 1
    told = check(History(sections=[section("a", 0, 100, 1, release="lost"),
                                   section("b", 10, 20, 2)]))
    assert told.silent_overlaps == 0


def test_a_semaphore_counts_only_moments_over_its_limit() -> None:
    two_at_once = [section("a", 0, 100, 1), section("b", 10, 50, 2), section("c", 60, 90, 3)]
    figures = check(History(sections=two_at_once), limit=2)
    assert figures.overlaps == figures.overlap_pairs == figures.silent_overlaps == 0
    assert figures.most_at_once == 2
    # d starts while a, b and c are all in progress: one moment over the limit, nobody told.
    three_at_once = [*two_at_once[:2], section("c", 20, 90, 3), section("d", 30, 40, 4),
                     section("e", 95, 99, 5)]
    figures = check(History(sections=three_at_once), limit=2)
    assert figures.most_at_once == 4
    assert [len(moment) for moment in excess_moments(three_at_once, 2)] == [3, 4]
    assert figures.overlaps == 4  # e overlaps only a: within the limit
    assert figures.silent_overlaps == 2
    told = [section("a", 0, 100, 1, lost=True), *three_at_once[1:]]
    assert check(History(sections=told), limit=2).silent_overlaps == 0
    # The mutex's figures are the limit-1 case.
    assert check(History(sections=three_at_once)).overlaps == 5


def test_weighted_permits_count_their_units_against_the_limit() -> None:
    # 3 + 3 + 2 = 8 units at once on a limit of 8: within it, though three permits.
    full = [section("a", 0, 100, 1, weight=3), section("b", 10, 50, 2, weight=3),
            section("c", 20, 90, 3, weight=2), section("d", 60, 95, 4, weight=3)]
    figures = check(History(sections=full), limit=8)
    assert figures.overlaps == figures.overlap_pairs == figures.silent_overlaps == 0
    assert figures.most_units_at_once == 8
    assert figures.most_at_once == 3
    # One unit more, while a, b and c are in progress: 9 units, one moment over the limit,
    # that nobody was told of; a section without a weight counts as one unit.
    over = [*full, section("e", 30, 40, 5)]
    figures = check(History(sections=over), limit=8)
    assert [len(moment) for moment in excess_moments(over, 8)] == [4]
    assert figures.most_units_at_once == 9
    assert figures.overlaps == 4 and figures.silent_overlaps == 1
    told = [section("a", 0, 100, 1, weight=3, lost=True), *over[1:]]
    assert check(History(sections=told), limit=8).silent_overlaps == 0
    # Weights are per name, and a history without them has no unit figure.
    assert most_units_at_once([*full, section("f", 0, 100, 6, name="other", weight=3)]) == 8
    assert check(History(sections=[section("a", 0, 10, 1)]), limit=2).most_units_at_once is None


def test_a_fence_not_above_an_earlier_finished_section_is_a_regression() -> None:
    # b asked after a ended, so b's grant came later: its fence must be higher.
    assert fence_regressions([section("a", 0, 10, 5), section("b", 20, 30, 3, asked=15)]) == 1
    # b asked before a ended (it waited): no order is implied by the times alone...
    assert fence_regressions([section("a", 0, 10, 5), section("b", 20, 30, 3, asked=5)]) == 0
    # ...but one fence for two sections is always a regression.
    assert fence_regressions([section("a", 0, 10, 4), section("b", 20, 30, 4, asked=5)]) == 1


def access(seq: int, op: str, section_key: str, fence: int, *, accepted: bool = True,
           value: int = 0) -> Access:
    return Access(seq, seq, op, section_key, fence, accepted, value, True)


def test_stale_writes_are_judged_in_the_resource_order() -> None:
    log = [
        access(1, "read", "old:1", 1),
        access(2, "read", "new:1", 2),
        access(3, "write", "new:1", 2, value=1),
        access(4, "write", "old:1", 1, value=1),  # the paused holder comes back: stale
        access(5, "write", "new:1", 2, value=2),  # same section again: not stale
    ]
    assert stale_writes(log) == (1, 0)
    refused = [*log[:3], access(4, "write", "old:1", 1, accepted=False, value=1)]
    assert stale_writes(refused) == (0, 1)


def test_lost_updates_are_accepted_writes_minus_the_final_value() -> None:
    log = [
        access(1, "read", "a:1", 1, value=0),
        access(2, "read", "b:1", 2, value=0),
        access(3, "write", "b:1", 2, value=1),
        access(4, "write", "a:1", 1, value=1),  # overwrites b's increment
    ]
    figures = check(History(accesses=log))
    assert figures.writes_accepted == 2
    assert figures.final_value == 1
    assert figures.lost_updates == 1
    assert figures.stale_writes_accepted == 1


def test_races_count_rounds_with_several_winners_and_with_none() -> None:
    attempts = [Attempt(0, "p1.0", True, 1), Attempt(0, "p1.1", False, None),
                Attempt(1, "p1.0", True, 1), Attempt(1, "p2.0", True, 1),
                Attempt(2, "p1.0", False, None, "BackendError")]
    figures = check_races(attempts)
    assert figures.rounds == 3
    assert figures.rounds_with_several_winners == 1
    assert figures.rounds_without_a_winner == 1
    assert figures.most_winners == 2
    assert figures.errors == 1


def test_reads_may_overlap_but_a_write_overlaps_nobody() -> None:
    reads = [section("a", 0, 100, 1, mode="read"), section("b", 10, 50, 2, mode="read"),
             section("c", 20, 30, 3, mode="read")]
    figures = check(History(sections=reads))
    assert figures.overlaps == figures.overlap_pairs == 0
    assert figures.most_readers_at_once == 3
    assert figures.write_fence_regressions == 0
    # A write inside the reads overlaps each of the two still in progress, told or not.
    with_write = [*reads, section("w", 40, 60, 4, mode="write")]
    figures = check(History(sections=with_write))
    assert figures.overlap_pairs == 2
    assert figures.overlaps == 3
    assert figures.silent_overlaps == 2
    # Sections of a mutex have no mode: they still exclude each other.
    assert check(History(sections=[section("a", 0, 10, 1), section("b", 5, 20, 2)])).overlaps


def test_a_write_fence_must_exceed_every_section_that_ended_before_it() -> None:
    fine = [section("r1", 0, 50, 3, mode="read"), section("r2", 10, 20, 1, mode="read"),
            section("w", 60, 70, 4, mode="write")]
    assert write_fence_regressions(fine) == []
    # r1 was granted before w (it ended before w began), yet its fence is higher; the
    # "asked" rule alone misses it (w asked before r1 ended).
    low = section("w", 60, 70, 2, mode="write", asked=5)
    regressed = [*fine[:2], low]
    assert write_fence_regressions(regressed) == [(fine[0], low)]
    assert fence_regressions(regressed) == 0
    assert check(History(sections=regressed)).write_fence_regressions == 1
    # A writer told its lease was gone is not judged: others' grants were then rightful.
    told = section("w", 60, 70, 2, mode="write", asked=5, lost=True)
    assert write_fence_regressions([*fine[:2], told]) == []
    # Reads are judged by the shared rule only: two readers' grants may come in any order.
    assert write_fence_regressions([section("a", 0, 10, 5, mode="read"),
                                    section("b", 20, 30, 4, mode="read", asked=5)]) == []


def test_the_verify_checker_reads_the_sections_calls() -> None:
    # a and b one after the other, fences rising: one valid order.
    clean = History(sections=[
        dataclasses.replace(section("a", 10, 20, 1), released=21),
        dataclasses.replace(section("b", 25, 30, 2), released=31),
    ])
    report = checked(clean, ttl=10.0)
    assert report.linearizable is True and report.operations == 4
    # b granted while a still held its (10 s) lease: no order explains both grants.
    overlapping = History(sections=[
        dataclasses.replace(section("a", 10_000_000, 20_000_000, 1), released=21_000_000),
        dataclasses.replace(section("b", 12_000_000, 14_000_000, 2), released=15_000_000),
    ])
    assert checked(overlapping, ttl=10.0).linearizable is False
    # The same overlap after a's lease ran out (ttl 1 ms): a's lease had expired, so b's
    # grant is explained, and a's release must then have failed; it said "ok": no order.
    expired = checked(overlapping, ttl=0.001)
    assert expired.linearizable is False
    told = History(sections=[
        dataclasses.replace(section("a", 10_000_000, 20_000_000, 1, release="lost"),
                            released=21_000_000),
        dataclasses.replace(section("b", 12_000_000, 14_000_000, 2), released=15_000_000),
    ])
    assert checked(told, ttl=0.001).linearizable is True
    # Read-write sections are left out of a lock's calls; an unanswered release is unknown.
    assert operations(History(sections=[section("r", 1, 2, 1, mode="read")]), ttl=1.0) == []
    [_, release] = operations(History(sections=[section("a", 1, 2, 1, release="error")]),
                              ttl=1.0)
    assert release.outcome == "unknown" and release.completed is None


MS = 1_000_000


def test_a_renewal_keeps_the_lease_live_for_the_checker() -> None:
    # a (ttl 1 s) renewed at 800 ms, b granted at 1.2 s while a held on; a's release at 1.5 s
    # answered "not ours" (the server had lost a's lease, as a restart without persistence).
    a = Section("a", 1, "k", 0, 1 * MS, 1500 * MS, 1, release="lost", released=1501 * MS,
                renewed=800 * MS)
    b = Section("b", 1, "k", 1100 * MS, 1200 * MS, 1300 * MS, 2, released=1301 * MS)
    # Without the renewal, a's lease may have run out from 0.988 s: b's grant is explained.
    unrenewed = History(sections=[dataclasses.replace(a, renewed=None), b])
    assert checked(unrenewed, ttl=1.0).linearizable is True
    assert certain_overlaps(unrenewed, ttl=1.0) == 0
    # Renewed at 800 ms, it was live until 1.788 s at the earliest: b granted while held.
    renewed = History(sections=[a, b])
    extend = [op for op in operations(renewed, ttl=1.0) if op.kind == "extend"]
    assert [(op.invoked, op.completed, op.outcome) for op in extend] == [(0.8, 1.5, "ok")]
    assert checked(renewed, ttl=1.0).linearizable is False
    assert certain_overlaps(renewed, ttl=1.0) == 1


def test_a_release_after_a_known_loss_is_an_unknown_outcome() -> None:
    # The holder knew its lease lost (a renewal failed): release says LockLost whatever the
    # server did, so the answer is the client's, not the service's.
    known = Section("a", 1, "k", 0, 1 * MS, 5 * MS, 1, lost=True, release="lost",
                    released=6 * MS)
    [_, release] = operations(History(sections=[known]), ttl=1.0)
    assert release.outcome == "unknown" and release.completed is None
    told = dataclasses.replace(known, lost=False)  # the server's own "not ours"
    [_, release] = operations(History(sections=[told]), ttl=1.0)
    assert release.outcome == "fail" and release.completed == 0.006


def test_read_write_sections_are_checked_against_the_rwlock_model() -> None:
    def side(worker: str, start: int, end: int, fence: int, mode: str) -> Section:
        return Section(worker, 1, "k", start * MS - MS, start * MS, end * MS, fence,
                       released=end * MS + MS, mode=mode)

    readers = History(sections=[side("r1", 10, 30, 1, "read"), side("r2", 15, 35, 2, "read"),
                                side("w", 40, 50, 3, "write")])
    report = checked(readers, ttl=10.0, primitive="rwlock")
    assert report.linearizable is True and report.operations == 6
    assert {op.primitive for op in operations(readers, ttl=10.0, primitive="rwlock")} == {
        "rwlock"}
    writer_among_readers = History(sections=[side("r1", 10, 30, 1, "read"),
                                             side("w", 15, 25, 2, "write")])
    assert checked(writer_among_readers, ttl=10.0, primitive="rwlock").linearizable is False
