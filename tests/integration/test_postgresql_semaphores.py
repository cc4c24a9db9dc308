"""PostgreSQL's semaphore permits on a real server, where the statements' own clock matters:
a renewal that waited for its permit's row while a release ended it does not revive it."""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections.abc import Iterator

import psycopg
import pytest

from tenure._types import Busy, Grant, Holder, Kind, LeaseSpec, Renewal
from tenure.backends.postgresql._semaphore_sql import HOLDER_TOKEN, PLACE_MARK, SemaphoreStatements
from tenure.backends.postgresql._sync.store import PostgreSQLStore
from tests.integration.sql_support import raw
from tests.timing import scaled

pytestmark = pytest.mark.postgresql

HOLDER = Holder("test-host", os.getpid(), "main")
PERMIT = LeaseSpec(Kind.SEMAPHORE, limit=1)


@pytest.fixture
def table() -> str:
    return f"sem_{uuid.uuid4().hex[:12]}"


@pytest.fixture
def backend(postgresql_url: str, table: str) -> Iterator[PostgreSQLStore]:
    backend = PostgreSQLStore.from_url(postgresql_url, table=table)
    try:
        yield backend
    finally:
        backend.close()


def test_a_renewal_that_waited_while_its_permit_ended_does_not_revive_it(
    postgresql_url: str, table: str, backend: PostgreSQLStore, name: str
) -> None:
    """The renewal reads the clock, then waits for its permit's row while a release (here a
    raw one, as the release writes it) ends it: the end it then sees is later than its
    clock, and it must not take the permit for live and revive it (the limit would then
    count a permit nobody holds, for its whole new ttl)."""
    assert isinstance(backend.acquire(name, PERMIT, "holder", 30, HOLDER), Grant)
    permits = SemaphoreStatements(table).quoted
    mine = f"name = %s AND {HOLDER_TOKEN} = 'holder'"
    conninfo = postgresql_url.partition("?")[0]
    with psycopg.connect(conninfo, autocommit=True) as ender:
        with ender.transaction():
            ender.execute(f"SELECT 1 FROM {permits} WHERE {mine} FOR UPDATE", (name,))
            outcome: list[list[bool]] = []
            renewal = threading.Thread(target=lambda: outcome.append(
                backend.extend_many([Renewal(name, "holder", 30, kind=Kind.SEMAPHORE)])
            ))
            renewal.start()
            renewal.join(0.5)
            assert renewal.is_alive(), "the renewal did not wait for the row"
            ender.execute(
                f"UPDATE {permits} SET expires_at = clock_timestamp(), host = NULL, "
                f"pid = NULL, thread = NULL WHERE {mine}", (name,)
            )
        renewal.join(10)
    assert outcome == [[False]]
    assert isinstance(backend.acquire(name, PERMIT, "next", 30, HOLDER), Grant)
    assert backend.release(Kind.SEMAPHORE, name, "next")


def test_a_dead_waiters_place_lapses_and_a_refreshed_one_keeps_its_turn(
    postgresql_url: str, table: str, backend: PostgreSQLStore, name: str
) -> None:
    """A weighted FIFO waiter that stops trying (its process died) leaves its place when
    queue_ttl runs out by the server's clock, and the next grant drops the row; a waiter
    that tries again keeps its arrival."""

    def spec(weight: int, queue_ttl: float) -> LeaseSpec:
        return LeaseSpec(Kind.SEMAPHORE, limit=4, weight=weight, queue_ttl=queue_ttl)

    dead, alive, later = (Holder(f"{who}-host", pid, "t")
                          for pid, who in enumerate(("dead", "alive", "later")))
    assert isinstance(backend.acquire(name, spec(1, 30), "holder", 30, HOLDER), Grant)
    assert isinstance(backend.acquire(name, spec(4, scaled(3.0)), "dead", 30, dead), Busy)
    # Behind the heavy place: 1 unit held + 4 ahead + 1 is over the limit.
    assert isinstance(backend.acquire(name, spec(1, 30), "alive", 30, alive), Busy)
    assert isinstance(backend.acquire(name, spec(1, 30), "later", 30, later), Busy)
    # alive tries again: its place is refreshed, still ahead of the later arrival.
    assert isinstance(backend.acquire(name, spec(1, 30), "alive", 30, alive), Busy)
    info = backend.inspect(Kind.SEMAPHORE, name)
    assert info is not None and info.units == 1
    assert [(w.holder and w.holder.host, w.weight) for w in info.waiters] == [
        ("dead-host", 4), ("alive-host", 1), ("later-host", 1)]
    deadline = time.monotonic() + scaled(10)
    while (info := backend.inspect(Kind.SEMAPHORE, name)) is not None and info.queued > 2:
        assert time.monotonic() < deadline, "the dead waiter's place never lapsed"
        time.sleep(0.05)
    assert isinstance(backend.acquire(name, spec(1, 30), "alive", 30, alive), Grant)
    places = raw(postgresql_url, f"SELECT token FROM {SemaphoreStatements(table).quoted} "
                 f"WHERE name = %s AND starts_with(token, '{PLACE_MARK}')", (name,))
    # The lapsed place was dropped, the granted one's removed; the later one waits on.
    assert places == [(PLACE_MARK + "later",)]
    assert isinstance(backend.acquire(name, spec(1, 30), "later", 30, later), Grant)
    assert backend.release(Kind.SEMAPHORE, name, "later")
    assert backend.release(Kind.SEMAPHORE, name, "alive")
    assert backend.release(Kind.SEMAPHORE, name, "holder")
