"""Elections on the consensus stores, checked on the server's own records: a campaign that
times out, before or after joining the queue, leaves no key (etcd) or node (ZooKeeper)
behind (the failed-campaign leak of etcd issues #21128 and #22123); a queued candidate is
never reported as the leader; a proclaim racing the renewer of a short lease neither loses
the leadership nor puts an older value back."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from kazoo.exceptions import NoNodeError

import tenure
from tenure.backends.etcd._keys import b64, name_prefix, prefix_end
from tenure.backends.zookeeper._nodes import encode_name
from tests.timing import renewed_ttl

SERVERS = {"etcd": "etcd_url", "zookeeper": "zookeeper_url"}

pytestmark = pytest.mark.parametrize(
    "server",
    [pytest.param(marker, marks=getattr(pytest.mark, marker)) for marker in SERVERS],
)


def _records(locks: tenure.Locks, server: str, name: str) -> list[str]:
    """The keys or nodes the server holds under the lock ``name`` (the default namespace)."""
    backend: Any = locks.backend
    if server == "etcd":
        prefix = name_prefix("tenure", "lock", name)
        answer = backend.gateway.post(
            "/v3/kv/range", {"key": b64(prefix), "range_end": b64(prefix_end(prefix))}
        )
        return [kv["key"] for kv in answer.get("kvs", [])]
    # A write of this session first: ZooKeeper answers reads from the session's own server,
    # which may lag a write another session just made (CI: a resign's delete not seen yet).
    backend.session.server_now()
    try:
        nodes: list[str] = backend.session.call(
            "get_children", f"/tenure/lock/{encode_name(name)}"
        )
    except NoNodeError:  # nothing was ever written under the name
        return []
    return [node for node in nodes if node.startswith("t-")]


@pytest.mark.parametrize("timeout", [0.0, 0.8])
def test_a_timed_out_campaign_leaves_no_record(
    server: str, timeout: float, name: str, request: pytest.FixtureRequest
) -> None:
    url = request.getfixturevalue(SERVERS[server])
    with tenure.connect(url) as one:
        leadership = one.election(name, ttl=10).campaign(value="first")
        # Closing a client waits for the undo of its failed campaigns, which runs in the
        # background. 0.8 s: long enough to join the queue and wait in it before giving up.
        with tenure.connect(url) as two:
            # The client's first contact (a ZooKeeper session, etcd's first requests) comes
            # first: under a 0 s timeout it is bounded by the 0.5 s slack alone, which a
            # loaded run's session set-up outlasted (ci12: a BackendError, not a timeout).
            assert two.election(name).leader() is not None
            with pytest.raises(tenure.LockTimeout):
                two.election(name, ttl=10).campaign(value="second", timeout=timeout)
        assert len(_records(one, server, name)) == 1
        leader = one.election(name).leader()
        assert leader is not None and (leader.value, leader.term) == ("first", leadership.term)
        leadership.resign()
        assert _records(one, server, name) == []
        assert one.election(name).leader() is None


def test_a_queued_candidate_is_not_the_leader_until_granted(
    server: str, name: str, request: pytest.FixtureRequest
) -> None:
    url = request.getfixturevalue(SERVERS[server])
    with tenure.connect(url) as one, tenure.connect(url) as two:
        first = one.election(name, ttl=10).campaign(value="first")
        won: list[tenure.Leadership] = []
        waiter = threading.Thread(
            target=lambda: won.append(two.election(name, ttl=10).campaign(value="second"))
        )
        waiter.start()
        try:
            # Wait until the second candidate has queued: two records on the server.
            while len(_records(one, server, name)) < 2 and waiter.is_alive():
                threading.Event().wait(0.02)
            leader = one.election(name).leader()
            assert leader is not None and (leader.value, leader.term) == ("first", first.term)
        finally:
            first.resign()
            waiter.join(timeout=30)
        (second,) = won
        leader = one.election(name).leader()
        assert second.term is not None and first.term is not None and second.term > first.term
        assert leader is not None and (leader.value, leader.term) == ("second", second.term)
        second.resign()
        assert _records(one, server, name) == []


def test_proclaims_racing_renewals_keep_the_leadership_and_the_last_value(
    server: str, name: str, request: pytest.FixtureRequest
) -> None:
    url = request.getfixturevalue(SERVERS[server])
    with tenure.connect(url) as locks:
        # Renewed every third of the ttl: a second stretched by the load (renewed_ttl), as a
        # fixed 1 s lease's renewal was once kept from the CPU past its end (ci4).
        ttl = renewed_ttl()
        election = locks.election(name, ttl=ttl)
        leadership = election.campaign(value="v-0")
        proclaimed = 0
        done = threading.Event()
        threading.Timer(3 * ttl, done.set).start()  # several renewals' worth of proclaims
        while not done.is_set():
            proclaimed += 1
            leadership.proclaim(f"v-{proclaimed}")
        leadership.check()
        leader = election.leader()
        assert leader is not None
        assert (leader.value, leader.term) == (f"v-{proclaimed}", leadership.term)
        leadership.resign()
        assert election.leader() is None
