"""PostgreSQL's failures read as every backend's do (the store base's one translation):
"<URL>: <action> of '<lock>' failed: <cause>", with the driver's error as the cause; a
statement the client-side watchdog cut short says that no answer came in time."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

import tenure

pytestmark = [pytest.mark.postgresql, pytest.mark.slow]

OPERATION_TIMEOUT = 1.0


def test_a_frozen_server_is_an_acquire_failure_with_no_answer_as_its_cause(
    restartable_postgresql: Any, name: str
) -> None:
    with tenure.connect(restartable_postgresql.url, timeout=OPERATION_TIMEOUT) as locks:
        warm = locks.lock(name, ttl=10)  # leaves a pooled connection to the live server
        assert warm.acquire()
        warm.release()
        restartable_postgresql.pause()
        try:
            with pytest.raises(tenure.BackendError) as raised:
                locks.lock(name, ttl=10).acquire(timeout=OPERATION_TIMEOUT * 5)
        finally:
            restartable_postgresql.resume()
    message = str(raised.value)
    assert message.startswith(f"{locks.store.describe()}: acquire of {name!r} failed: "), message
    assert message.endswith(f"no answer within {OPERATION_TIMEOUT} s"), message
    cause = raised.value.__cause__
    assert isinstance(cause, TimeoutError)
    assert isinstance(cause.__cause__, psycopg.OperationalError)  # the driver's own


def test_a_release_on_a_stopped_server_names_the_release(
    restartable_postgresql: Any, name: str
) -> None:
    with tenure.connect(restartable_postgresql.url, timeout=OPERATION_TIMEOUT) as locks:
        lock = locks.lock(name, ttl=30)
        assert lock.acquire()
        restartable_postgresql.stop()
        try:
            with pytest.raises(tenure.BackendError) as raised:
                lock.release()
        finally:
            restartable_postgresql.process.start()
    message = str(raised.value)
    assert message.startswith(f"{locks.store.describe()}: release of {name!r} failed: "), message
    assert isinstance(raised.value.__cause__, psycopg.Error)
