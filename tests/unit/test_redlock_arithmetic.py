"""Redlock's quorum and validity arithmetic, node-state merging, and URL forms: pure
functions, no server."""

from __future__ import annotations

import datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

import tenure
from tenure._errors import ConfigurationError
from tenure._types import Holder, LockInfo
from tenure.backends.redlock._config import parse
from tenure.backends.redlock._quorum import (
    Verdict,
    busy_ttl_left,
    combine_infos,
    drift,
    lease_left,
    node_ttl,
    quorum,
    reachable_quorum,
    validity,
    verdict,
)


@pytest.mark.parametrize(("nodes", "majority"), [(1, 1), (2, 2), (3, 2), (4, 3), (5, 3), (7, 4)])
def test_quorum_is_a_strict_majority(nodes: int, majority: int) -> None:
    assert quorum(nodes) == majority
    assert 2 * quorum(nodes) > nodes  # any two majorities share a node


@given(
    st.floats(min_value=0.001, max_value=86400),
    st.floats(min_value=0.0, max_value=0.2),
    st.floats(min_value=0.0, max_value=1.0),
)
def test_node_lease_less_drift_is_exactly_the_lock_lease(
    ttl: float, rate: float, margin: float
) -> None:
    """Redlock's validity end (started + node_ttl - drift(node_ttl)) is the lock logic's
    lease end (started + ttl): check() is never later than Redlock allows."""
    asked = node_ttl(ttl, rate, margin)
    assert asked >= ttl
    assert asked - drift(asked, rate, margin) == pytest.approx(ttl, rel=1e-9, abs=1e-12)
    assert lease_left(asked, rate, margin) == pytest.approx(ttl, rel=1e-9, abs=1e-9)


def test_default_drift_is_one_percent_and_two_milliseconds() -> None:
    assert drift(10.0) == pytest.approx(0.102)
    assert node_ttl(10.0) == pytest.approx(10.002 / 0.99)


def test_validity_is_what_is_left_of_the_ttl() -> None:
    assert validity(1.0, 0.25) == 0.75
    assert validity(1.0, 1.0) <= 0  # no grant


@pytest.mark.parametrize(
    ("yes", "failed", "nodes", "expected"),
    [
        (3, 0, 5, Verdict.YES),
        (3, 2, 5, Verdict.YES),
        (2, 0, 5, Verdict.NO),  # three said no
        (2, 1, 5, Verdict.UNKNOWN),  # the failed node may have said yes
        (0, 3, 5, Verdict.UNKNOWN),
        (1, 1, 3, Verdict.UNKNOWN),
        (1, 0, 3, Verdict.NO),
    ],
)
def test_verdicts(yes: int, failed: int, nodes: int, expected: Verdict) -> None:
    assert verdict(yes, failed, nodes) is expected


def test_reachable_quorum() -> None:
    assert reachable_quorum(2, 5) and not reachable_quorum(3, 5)
    assert reachable_quorum(1, 3) and not reachable_quorum(2, 3)


def test_busy_ttl_left_is_when_enough_nodes_free_up() -> None:
    # 5 nodes, none granted: the 3rd-shortest busy lease frees a majority.
    assert busy_ttl_left(0, [5.0, 1.0, 3.0, 2.0, 4.0], 5) == 3.0
    # 2 granted: one more node is enough.
    assert busy_ttl_left(2, [5.0, 1.5, 3.0], 5) == 1.5
    assert busy_ttl_left(3, [], 5) == 0.0
    # Unknown expiries are skipped; too few known ones: unknown.
    assert busy_ttl_left(0, [None, 1.0, 2.0, None, 4.0], 5) == 4.0
    assert busy_ttl_left(0, [None, None, 1.0], 3) is None


HOLDER = Holder("h", 1, "t")
OTHER = Holder("h", 2, "t")
WHEN = datetime.datetime(2024, 1, 1, tzinfo=datetime.UTC)


def info(fence: int, holder: Holder | None = None, ttl: float | None = None,
         seconds: int = 0) -> LockInfo:
    since = WHEN + datetime.timedelta(seconds=seconds) if holder else None
    return LockInfo("n", fence, holder, since, ttl if holder else None)


def test_combined_state_is_held_only_by_a_majority() -> None:
    assert combine_infos([None, None, None], 3) is None
    combined = combine_infos(
        [info(4, HOLDER, 9.0, 1), info(7, HOLDER, 10.0, 0), info(2, OTHER, 5.0)], 3, 0.0, 0.0
    )
    assert combined is not None
    assert combined.fence == 7 and combined.holder == HOLDER
    assert combined.ttl_left == 9.0  # a majority keeps it this long
    assert combined.acquired_at == WHEN + datetime.timedelta(seconds=1)
    split = combine_infos([info(1, HOLDER, 9.0), info(1, OTHER, 9.0), info(1)], 3)
    assert split is not None and not split.held and split.fence == 1


def test_url_forms() -> None:
    settings = parse("redlock://u:pw@a:1,b:2,c/3?socket_timeout=0.5&namespace=x", {})
    assert [node.addresses for node in settings.nodes] == [
        (("a", 1),), (("b", 2),), (("c", 6379),)
    ]
    assert all(node.db == 3 and node.password == "pw" and node.username == "u"
               for node in settings.nodes)
    assert all(node.socket_timeout == 0.5 and node.namespace == "x" for node in settings.nodes)
    assert "pw" not in settings.display
    default = parse("redlock://a,b,c", {})
    assert all(node.socket_timeout == 0.2 and node.socket_connect_timeout == 0.2
               for node in default.nodes)
    assert default.drift_rate == 0.01 and default.drift_margin == 0.002


def test_credentials_before_each_host_give_three_nodes_not_one() -> None:
    # Split at the last "@", this URL was ONE node (127.0.0.1:3) whose password held the
    # other two hosts: a one-node "Redlock" that looked fine.
    settings = parse("redlock://:pw@127.0.0.1:1,:pw@127.0.0.1:2,:pw@127.0.0.1:3", {})
    assert [node.addresses for node in settings.nodes] == [
        (("127.0.0.1", 1),), (("127.0.0.1", 2),), (("127.0.0.1", 3),)
    ]
    assert [node.password for node in settings.nodes] == ["pw", "pw", "pw"]
    # Independent servers may each have their own.
    own = parse("redlock://:one@a:1,u:two@b:2,:th%40ree@c:3", {})
    assert [(n.username, n.password) for n in own.nodes] == [
        (None, "one"), ("u", "two"), (None, "th@ree")
    ]
    assert "one" not in own.display and "two" not in own.display
    assert own.display == "redlock://:***@a:1,u:***@b:2,:***@c:3"


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("redlock://127.0.0.1:6379", "at least 3 independent nodes, not 1"),
        ("redlock://:pw@a:1,b:2", "at least 3 independent nodes, not 2"),
        ("redlock://:pw@a:1,b:2,:pw@c:3", "cannot tell which credentials go with which host"),
        ("redlock://:p,w@a:1,b:2,c:3", "cannot tell which credentials go with which host"),
    ],
)
def test_a_quorum_url_that_may_not_mean_what_it_says_is_refused(url: str, message: str) -> None:
    with pytest.raises(tenure.ConfigurationError, match=message) as caught:
        parse(url, {})
    assert "pw" not in str(caught.value)


def test_keyword_form_with_per_node_options() -> None:
    settings = parse(
        "redlock://",
        {
            "nodes": [
                "redis://a:1/0?socket_timeout=0.3",
                {"url": "rediss://b:2/0", "password": "secret"},
                {"url": "unix:///tmp/r.sock", "db": 2},
            ],
            "socket_timeout": 0.1,
            "clock_drift_rate": 0.02,
        },
    )
    first, second, third = settings.nodes
    assert first.socket_timeout == 0.3 and second.socket_timeout == 0.1
    assert second.tls and second.password == "secret"
    assert third.unix_path == "/tmp/r.sock" and third.db == 2
    assert settings.drift_rate == 0.02
    assert "secret" not in settings.display


@pytest.mark.parametrize(
    ("url", "options"),
    [
        ("redlock://", {}),
        ("redis://a:1", {}),
        ("redlock://a:1,a:1,b:2", {}),  # one server counted twice
        ("redlock://a:1,b:2", {"nodes": ["redis://c:3"]}),
        ("redlock://", {"nodes": ["redis+cluster://a:1"]}),
        ("redlock://", {"nodes": [42]}),
        ("redlock://", {"nodes": []}),
        ("redlock://a,b,c?bogus=1", {}),
        ("redlock://a,b,c?handoff_window=0", {}),
        ("redlock://a,b,c", {"clock_drift_rate": 0.9}),
        ("redlock://a,b,c?password=x", {}),
        ("redlock://", {"nodes": [{"url": "redis://a/0", "namespace": "x"}, "redis://b/0"]}),
    ],
)
def test_bad_configurations_are_refused(url: str, options: dict[str, object]) -> None:
    with pytest.raises(ConfigurationError):
        parse(url, options)
