"""The safety tests run only on the backends their scenario applies to. When a ``--backends``
choice leaves a scenario none, pytest would report a skipped "empty parameter set" test;
such a test is not generated at all instead (deselected), as for any other backend where the
scenario does not apply."""

from __future__ import annotations

import pytest

from tests.servers.redlock import RedlockNodes


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    keep: list[pytest.Item] = []
    drop: list[pytest.Item] = []
    for item in items:
        skip = item.get_closest_marker("skip")
        empty = skip is not None and str(skip.kwargs.get("reason", "")).startswith(
            "got empty parameter set"
        )
        (drop if empty and "tests/safety/" in item.nodeid else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


@pytest.fixture(scope="session")
def redlock_url(redlock_nodes: RedlockNodes) -> str:
    """The session's Redlock nodes with the product's default 0.2 s node timeout: the
    scenarios here measure what the defaults promise, and Redlock needs a node timeout far
    below the lease's time to live (their leases last 1 s; a renewal that waits out a slow
    node loses the time it waited). The conformance suite's URL gives nodes 1 s instead."""
    return redlock_nodes.url
