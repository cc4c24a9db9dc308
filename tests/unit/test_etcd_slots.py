"""The names a client writes its etcd lock keys under (``tenure.backends.etcd._slots``): one
per acquisition at a time, reused by the next, never while anything sent about it may
still land."""

from __future__ import annotations

import os

from tenure.backends.etcd._slots import Slots

PREFIX = "tenure/lock/n/"


def test_one_acquisition_after_another_writes_the_same_key() -> None:
    slots = Slots()
    first = slots.claim("lock", "n", "t1", PREFIX)
    assert slots.claim("lock", "n", "t1", PREFIX) is first  # the same acquisition's
    slots.free("lock", "n", "t1")
    assert slots.claim("lock", "n", "t2", PREFIX).key == first.key


def test_acquisitions_at_once_never_share_a_key() -> None:
    slots = Slots()
    keys = {slots.claim("lock", "n", f"t{i}", PREFIX).key for i in range(3)}
    assert len(keys) == 3
    slots.free("lock", "n", "t1")
    assert slots.claim("lock", "n", "t3", PREFIX).key not in (
        slots.claim("lock", "n", "t0", PREFIX).key, slots.claim("lock", "n", "t2", PREFIX).key)
    # Another name, or another kind, counts its own.
    assert slots.claim("lock", "m", "t0", "tenure/lock/m/").index == 0
    assert slots.claim("semaphore", "n", "t0", PREFIX).index == 0


def test_a_slot_with_a_request_unanswered_or_sent_twice_is_never_reused() -> None:
    slots = Slots()
    unanswered = slots.claim("lock", "n", "t1", PREFIX)
    unanswered.sending()  # and never answered: an error, a cancellation
    slots.free("lock", "n", "t1")
    doubted = slots.claim("lock", "n", "t2", PREFIX)
    assert doubted.key != unanswered.key
    doubted.sending()
    doubted.doubt()  # a failed try, then another member: the first copy may still land
    doubted.answered()
    slots.free("lock", "n", "t2")
    fresh = slots.claim("lock", "n", "t3", PREFIX)
    assert fresh.key not in (unanswered.key, doubted.key)
    # The doubted acquisition still finds its key (an undo reads it by its token).
    assert slots.get("lock", "n", "t2") is doubted


def test_a_retired_key_is_never_written_again() -> None:
    slots = Slots()
    kept = slots.claim("lock", "n", "t1", PREFIX)
    slots.retire("lock", "n", "t1")  # outlives its acquisition (hold_at_least)
    assert slots.get("lock", "n", "t1") is None
    assert slots.claim("lock", "n", "t2", PREFIX).key != kept.key


def test_keys_belong_to_one_client_and_process() -> None:
    ours, theirs = Slots(), Slots()
    assert ours.claim("lock", "n", "t", PREFIX).key != theirs.claim("lock", "n", "t", PREFIX).key
    key = ours.claim("lock", "n", "t", PREFIX).key
    pid = os.fork()
    if pid == 0:  # a forked child holds none of its parent's keys, and writes none of them
        inherited = ours.get("lock", "n", "t")
        child = ours.claim("lock", "n", "t", PREFIX).key
        os._exit(0 if inherited is None and child != key else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
