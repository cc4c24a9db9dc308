"""The safety tests run only on the backends their scenario applies to. When a ``--backends``
choice leaves a scenario none, pytest would report a skipped "empty parameter set" test;
such a test is not generated at all instead (deselected), as for any other backend where the
scenario does not apply."""

from __future__ import annotations

import pytest


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
