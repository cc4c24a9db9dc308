"""Weighted permits across real processes, on every backend that offers them and that
processes share (memory:// lives in one process, so it is left out; a server backend joins
by offering "weighted"): 16 processes with weights 1 to 3 contending for a limit=8 semaphore
never take more than 8 units at once (from their enter and exit stamps), reach 8 (the
first round fills it by construction), and every one of them is served every round; the
longest wait is reported.

``TENURE_WEIGHTED_ROUNDS`` sets the permits each process takes (default 10).
"""

from __future__ import annotations

import os
import pathlib
from collections.abc import Callable

import pytest

import tenure
from tests.backends import row
from tests.conftest import offers, selected_backends
from tests.integration.processes import most_units_at_once, run_permits
from tests.timing import scaled

pytestmark = pytest.mark.slow

PRIMITIVE = "weighted"
PROCESSES = 16
LIMIT = 8
WEIGHTS = [3, 3, 2] + [1 + index % 3 for index in range(PROCESSES - 3)]
"""Weights 1 to 3, in the order the processes first ask: the first three add up to the
limit, so the staged first round (see ``run_permits``) fills it exactly."""
ROUNDS = int(os.environ.get("TENURE_WEIGHTED_ROUNDS", "10"))
HOLD = 0.02
"""Seconds each permit is held after the first round, so that permits overlap."""


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    # The backend table and --backends, like backend_url, without memory:// (one process).
    if "shared_url" in metafunc.fixturenames:
        params = [
            row(backend).param()
            for backend in selected_backends(metafunc.config)
            if backend != "memory" and offers(backend, PRIMITIVE)
        ]
        metafunc.parametrize("shared_url", params, indirect=True)


@pytest.fixture
def shared_url(request: pytest.FixtureRequest) -> str:
    """The URL of a ready backend that several processes share."""
    url: str = request.getfixturevalue(row(request.param).fixture)
    return url


def test_sixteen_weighted_processes_never_take_more_than_the_limit(
    shared_url: str, tmp_path: pathlib.Path, name: str,
    record_property: Callable[[str, object], None],
) -> None:
    seen = run_permits(shared_url, name, tmp_path, weights=WEIGHTS, rounds=ROUNDS,
                                limit=LIMIT, hold=scaled(HOLD))
    assert [len(permits) for permits in seen] == [ROUNDS] * PROCESSES  # every one served
    permits = [permit for process in seen for permit in process]
    most = most_units_at_once(permits)
    assert most <= LIMIT, f"{most} units in use at once"
    assert most == LIMIT, f"the {LIMIT} units were never all in use at once"
    fences = [fence for _, _, _, fence, _ in permits]
    assert len(set(fences)) == len(fences), "a fence was granted twice"
    waits = {weight: max((entered - asked) / 1e9 for asked, entered, _, _, w in permits
                         if w == weight) for weight in set(WEIGHTS)}
    longest = max(waits.values())
    record_property("longest_wait_seconds", round(longest, 3))
    print(f"\nlongest wait {longest:.3f} s; by weight: "
          + ", ".join(f"{w}: {s:.3f} s" for w, s in sorted(waits.items())))
    with tenure.connect(shared_url) as locks:
        info = locks.inspect(name, kind="semaphore")
        assert info is not None and info.leases == () and info.units == 0
        assert info.waiters == () and info.fence == max(fences)
