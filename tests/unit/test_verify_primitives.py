"""The checker's models of read-write locks and elections (``tenure.verify.primitives``) on
histories small enough to judge by hand, and on simulated ones: a correct store's histories
are linearizable; each kind of impossible answer is caught."""

from __future__ import annotations

import dataclasses

from hypothesis import given
from hypothesis import strategies as st

from tenure.verify import Operation, check, describe_violation, load, save
from tenure.verify.simulation import simulate

TTL = 10.0


def rw(client: int, kind: str, invoked: float, completed: float | None, outcome: str = "ok",
       **fields: object) -> Operation:
    if kind in ("acquire", "extend"):
        fields.setdefault("ttl", TTL)
    return Operation(client=client, name="n", kind=kind, invoked=invoked, completed=completed,
                     outcome=outcome, primitive="rwlock", **fields)  # type: ignore[arg-type]


def read(client: int, lease: str, at: float, fence: int, took: float = 0.1) -> Operation:
    return rw(client, "acquire", at, at + took, lease=lease, fence=fence, mode="read")


def write(client: int, lease: str, at: float, fence: int, took: float = 0.1) -> Operation:
    return rw(client, "acquire", at, at + took, lease=lease, fence=fence, mode="write")


def release(client: int, lease: str, at: float, outcome: str = "ok") -> Operation:
    return rw(client, "release", at, at + 0.1, outcome, lease=lease)


def inspect(at: float, mode: str | None, *fences: int) -> Operation:
    return rw(9, "inspect", at, at + 0.1, held=mode is not None, mode=mode,
              fences=fences if mode is not None else ())


def election(client: int, kind: str, invoked: float, completed: float | None,
             outcome: str = "ok", **fields: object) -> Operation:
    if kind in ("acquire", "extend"):
        fields.setdefault("ttl", TTL)
    return Operation(client=client, name="e", kind=kind, invoked=invoked, completed=completed,
                     outcome=outcome, primitive="election", **fields)  # type: ignore[arg-type]


def elected(client: int, lease: str, at: float, term: int) -> Operation:
    return election(client, "acquire", at, at + 0.1, lease=lease, fence=term)


def leader(at: float, lease: str | None, term: int | None = None) -> Operation:
    return election(9, "leader", at, at + 0.1, held=lease is not None, lease=lease, fence=term)


def reason(*history: Operation) -> str:
    """The reason the blocked call of the (only) violation gives; "" when linearizable."""
    report = check(history)
    if report.linearizable:
        return ""
    stuck = report.violations[0].stuck
    return stuck.reasons[stuck.blocking]


# ---- read-write locks ----------------------------------------------------------------------


def test_readers_overlap() -> None:
    assert check([read(1, "a", 0, 5), read(2, "b", 1, 6), inspect(2, "read", 5, 6),
                  release(1, "a", 3), inspect(4, "read", 6)]).linearizable


def test_two_overlapping_writers() -> None:
    assert "write granted while held: write lease a" in reason(write(1, "a", 0, 5),
                                                              write(2, "b", 1, 6))


def test_a_reader_overlapping_a_writer() -> None:
    assert "write granted while held: read lease a" in reason(read(1, "a", 0, 5),
                                                             write(2, "b", 1, 6))
    assert "read granted while held: write lease a" in reason(write(1, "a", 0, 5),
                                                             read(2, "b", 1, 6))


def test_hand_overs_between_modes() -> None:
    assert check([read(1, "a", 0, 5), read(2, "b", 0.5, 6), release(1, "a", 1),
                  release(2, "b", 2), write(3, "c", 3, 7), release(3, "c", 4),
                  read(1, "d", 5, 8), write(2, "e", TTL + 6, 9)]).linearizable


def test_a_write_fence_is_above_every_earlier_fence() -> None:
    assert "not above fence 6" in reason(read(1, "a", 0, 5), read(2, "b", 0.5, 6),
                                         release(1, "a", 1), release(2, "b", 1.5),
                                         write(3, "c", 2, 5))


def test_readers_granted_together_may_get_fences_in_any_order() -> None:
    # Both readers waited behind writer w (etcd and ZooKeeper give them their queue
    # places' fences, 8 and 7, in any order); each is still above w's fence.
    together = [write(1, "w", 0, 5), read(2, "b", 0.5, 8, took=2), read(3, "c", 0.6, 7, took=2),
                release(1, "w", 1)]
    assert check(together).linearizable
    # But never at or below the last write's.
    assert "not above write fence 5" in reason(write(1, "w", 0, 5), release(1, "w", 1),
                                               read(2, "b", 2, 4))
    # And never one a live lease holds.
    assert "which a live lease holds" in reason(read(1, "a", 0, 5), read(2, "b", 1, 5))


def test_refusals_and_locked_true_prove_little() -> None:
    # A queue (invisible to the model) refuses and makes locked() True while nobody holds.
    queued = [rw(1, "acquire", 0, 0.1, "fail", lease="a", mode="write"),
              rw(2, "locked", 0.2, 0.3, held=True, mode="read")]
    assert check(queued).linearizable
    assert check(queued, strict_refusals=True).linearizable is False


def test_locked_false_needs_the_side_free() -> None:
    assert check([read(1, "a", 0, 5), rw(2, "locked", 1, 1.1, held=False,
                                         mode="read")]).linearizable
    assert "answered not held (write side) while read lease a" in reason(
        read(1, "a", 0, 5), rw(2, "locked", 1, 1.1, held=False, mode="write"))


def test_inspect_is_checked_against_the_live_leases() -> None:
    live = [read(1, "a", 0, 5), read(2, "b", 0.5, 6)]
    assert "listed a writer while no write lease was live (read leases a, b were)" in reason(
        *live, inspect(1, "write", 6))
    assert "listed readers with fence(s) 9, which no live lease has" in reason(
        *live, inspect(1, "read", 5, 6, 9))
    assert "inspect left out while read lease b" in reason(*live, inspect(1, "read", 5))
    assert "inspect listed no lease while read lease a" in reason(*live, inspect(1, None))
    assert "a writer is alone" in reason(*live, inspect(1, "write", 5, 6))
    assert "listed only readers while write lease w" in reason(
        write(1, "w", 0, 5), inspect(1, "read", 5))
    assert "but the live write lease w has fence 5" in reason(
        write(1, "w", 0, 5), inspect(1, "write", 4))


def test_inspect_may_show_a_lease_whose_grant_went_unanswered() -> None:
    lost = rw(1, "acquire", 0, None, "unknown", lease="a", mode="read")
    assert check([lost, inspect(1, "read", 42), inspect(2, None)]).linearizable
    assert check([lost, inspect(1, "write", 42)]).linearizable is False


def test_an_expired_lease_may_be_left_out() -> None:
    assert check([read(1, "a", 0, 5), read(2, "b", 0.5, 6),
                  inspect(TTL + 1, "read", 6)]).linearizable


def test_an_rwlock_violation_is_described() -> None:
    report = check([read(1, "a", 0, 5), write(2, "b", 1, 6)])
    text = describe_violation(report.violations[0])
    assert "acquire read a (ttl 10 s) -> granted, fence 5" in text
    assert "acquire write b (ttl 10 s) -> granted, fence 6  <- cannot be placed" in text
    assert "leaving read lease a live (fence 5" in text


def test_rwlock_histories_round_trip(tmp_path: object) -> None:
    import pathlib

    assert isinstance(tmp_path, pathlib.Path)
    history = simulate(300, lost=0.1, primitive="rwlock", seed=4)
    assert any(op.fences for op in history)
    save(tmp_path / "h.jsonl", history)
    assert load(tmp_path / "h.jsonl")[0] == history


# ---- elections -------------------------------------------------------------------------------


def test_leader_reads_the_live_leader() -> None:
    assert check([elected(1, "a", 0, 5), leader(1, "a", 5),
                  election(1, "release", 2, 2.1, lease="a"), leader(3, None),
                  elected(2, "b", 4, 6), leader(5, "b", 6)]).linearizable


def test_leader_naming_a_resigned_leader() -> None:
    assert "named lease a (term 5), which was not live" in reason(
        elected(1, "a", 0, 5), election(1, "release", 1, 1.1, lease="a"), leader(2, "a", 5))
    # While the resignation is in flight, either answer is fine.
    assert check([elected(1, "a", 0, 5), election(1, "release", 1, 3, lease="a"),
                  leader(2, "a", 5)]).linearizable


def test_leader_with_another_term() -> None:
    assert "read term 4 for lease a, elected with term 5" in reason(elected(1, "a", 0, 5),
                                                                   leader(1, "a", 4))


def test_no_leader_while_one_is_live_unless_it_may_have_expired() -> None:
    assert "answered no leader while lease a" in reason(elected(1, "a", 0, 5), leader(1, None))
    assert check([elected(1, "a", 0, 5), leader(TTL + 1, None)]).linearizable


def test_terms_going_back() -> None:
    assert "not above fence 5" in reason(elected(1, "a", 0, 5),
                                         election(1, "release", 1, 1.1, lease="a"),
                                         elected(2, "b", 2, 4))


def test_leader_teaches_the_term_of_an_unanswered_campaign() -> None:
    lost = election(1, "acquire", 0, None, "unknown", lease="a")
    assert check([elected(2, "z", -2, 3), election(2, "release", -1, -0.9, lease="z"), lost,
                  leader(1, "a", 7)]).linearizable
    # A term read for it must be above the terms before it...
    assert "not above term 3 elected before it" in reason(
        elected(2, "z", -2, 3), election(2, "release", -1, -0.9, lease="z"), lost,
        leader(1, "a", 2))
    # ...and once learned, binds the next campaign.
    assert check([lost, leader(1, "a", 7), election(2, "acquire", TTL + 1, TTL + 1.1,
                                                    lease="b", fence=6)]).linearizable is False


def test_an_election_violation_is_described() -> None:
    report = check([elected(1, "a", 0, 5), election(1, "release", 1, 1.1, lease="a"),
                    leader(2, "a", 5)])
    text = describe_violation(report.violations[0])
    assert "campaign a (ttl 10 s) -> elected, term 5" in text
    assert "resign a -> ok" in text and "leader -> a, term 5  <- cannot be placed" in text


# ---- generated histories ---------------------------------------------------------------------


@given(seed=st.integers(0, 2**32 - 1), clients=st.integers(1, 6),
       primitive=st.sampled_from(["rwlock", "election"]),
       latency=st.sampled_from([0.001, 0.02, 0.1]), lost=st.sampled_from([0.0, 0.05, 0.2]))
def test_simulated_histories_are_linearizable(seed: int, clients: int, primitive: str,
                                              latency: float, lost: float) -> None:
    history = simulate(300, clients=clients, names=2, ttl=0.1, latency=latency, lost=lost,
                       primitive=primitive, seed=seed)
    report = check(history)
    assert report.linearizable, "\n".join(describe_violation(v) for v in report.violations)


@given(seed=st.integers(0, 2**32 - 1), primitive=st.sampled_from(["rwlock", "election"]),
       data=st.data())
def test_a_changed_answer_is_caught_or_still_possible(seed: int, primitive: str,
                                                      data: st.DataObject) -> None:
    """A write granted while readers live, or a leader answer naming a lease gone long ago,
    spliced into a correct history, is always caught."""
    history = simulate(80, clients=3, names=1, ttl=1.0, latency=0.01, primitive=primitive,
                       seed=seed)
    held = [op for op in history if op.kind == "acquire" and op.outcome == "ok"
            and (primitive == "election" or op.mode == "read")]
    if not held:
        return
    victim = data.draw(st.sampled_from(held))
    assert victim.completed is not None
    at = victim.completed + 0.001
    if primitive == "rwlock":
        # A later release of the reader could not have come before this write's grant.
        spliced = write(7, "intruder", at, 10**9, took=0.0005)
        cut = [op for op in history if op.lease != victim.lease or op.kind == "acquire"]
    else:
        spliced = dataclasses.replace(leader(at, victim.lease, victim.fence), name=victim.name,
                                      completed=at + 0.0005)
        cut = [op for op in history if op.lease != victim.lease or op.kind == "acquire"]
        cut.append(dataclasses.replace(election(victim.client, "release", victim.completed,
                                                at - 0.0005, lease=victim.lease),
                                       name=victim.name))
    spliced = dataclasses.replace(spliced, name=victim.name)
    assert check([*cut, spliced]).linearizable is False
