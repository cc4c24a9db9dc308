"""Real processes on real MariaDB and PostgreSQL: no lost update, a killed holder replaced
within its ttl, fences that only grow across 1,000 acquisitions and server restarts."""

from __future__ import annotations

import itertools
import os
import pathlib
import uuid
from typing import Any

import pytest

import tenure
from tests.integration.processes import finish, run_counter, sigkill_handover_seconds, worker
from tests.integration.sql_support import SQL_BACKENDS, url_fixture

pytestmark = pytest.mark.slow


@pytest.fixture(params=SQL_BACKENDS)
def sql_url(request: pytest.FixtureRequest) -> str:
    return url_fixture(request)


@pytest.fixture(params=SQL_BACKENDS)
def sql_server(request: pytest.FixtureRequest) -> Any:
    """A server of the test's own, to restart and kill."""
    return request.getfixturevalue(f"restartable_{request.param}")


def test_processes_lose_no_update(sql_url: str, tmp_path: pathlib.Path, name: str) -> None:
    count, fences = run_counter(sql_url, name, tmp_path, processes=6, rounds=200)
    assert count == 1200
    # Every grant its own fence (sorted, so strictly increasing = all distinct); a backend
    # that counts per name skips none.
    assert len(fences) == 1200 and all(a < b for a, b in itertools.pairwise(fences))
    with tenure.connect(sql_url) as locks:
        counting = locks.capabilities.fences_count_per_name
    if counting:
        assert fences == list(range(1, 1201))


def test_sigkilled_holder_is_replaced_within_ttl_plus_one_second(sql_url: str, name: str) -> None:
    ttl = 2.0
    elapsed = sigkill_handover_seconds(sql_url, name, ttl)
    assert elapsed <= ttl + 1.0, elapsed


def _cycles(locks: tenure.Locks, name: str, count: int) -> list[int]:
    fences = []
    for _ in range(count):
        lock = locks.lock(name, ttl=30)
        assert lock.acquire(timeout=10)
        assert lock.fence is not None
        fences.append(lock.fence)
        lock.release()
    return fences


def test_fences_increase_over_1000_acquisitions_and_server_restarts(
    sql_server: Any, name: str
) -> None:
    url = sql_server.url
    with tenure.connect(url) as locks:
        seen = _cycles(locks, name, 400)
        seen += [int(f) for f in finish(worker("fences", url, name, "200")).split()]
        sql_server.restart()  # clean shutdown; the same client reconnects on its own
        seen += _cycles(locks, name, 200)
        sql_server.kill()  # a crash: committed grants must survive it too
        sql_server.process.start()
        seen += _cycles(locks, name, 200)
    assert len(seen) == 1000
    assert all(a < b for a, b in itertools.pairwise(seen)), seen
    if locks.capabilities.fences_count_per_name:
        assert seen[-1] == 1000  # no grant skipped a number


def test_lease_survives_a_server_restart(sql_server: Any, name: str) -> None:
    with tenure.connect(sql_server.url) as locks:
        lock = locks.lock(name, ttl=60)
        assert lock.acquire(blocking=False)
        fence = lock.fence
        sql_server.restart()
        assert lock.owned()
        assert locks.lock(name, ttl=60).acquire(blocking=False) is False
        info = locks.inspect(name)
        assert info is not None and info.held and info.fence == fence
        assert info.holder is not None and info.holder.pid == os.getpid()
        lock.release()


def test_forked_child_uses_its_own_connections(sql_url: str) -> None:
    """A child forked while the client has pooled connections (and, on PostgreSQL, a
    listener) must neither use nor close the parent's: the parent keeps working."""
    base = f"fork:{uuid.uuid4().hex}"
    with tenure.connect(sql_url) as locks:
        held = locks.lock(f"{base}:parent", ttl=30)
        assert held.acquire()
        # Start PostgreSQL's listener: the waiter times out on the held lock.
        assert locks.lock(f"{base}:parent", ttl=30).acquire(timeout=0.2) is False
        pid = os.fork()
        if pid == 0:  # the child: exit status says whether it worked
            status = 1
            try:
                child = locks.lock(f"{base}:child", ttl=30)
                if child.acquire(timeout=5) and held.fence is None:
                    child.release()
                    status = 0
            finally:
                os._exit(status)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        # The parent's pooled connections and lease are intact.
        assert held.owned()
        held.release()
        info = locks.inspect(f"{base}:child")
        assert info is not None and info.fence > 0 and not info.held
        if locks.capabilities.fences_count_per_name:
            assert info.fence == 1
