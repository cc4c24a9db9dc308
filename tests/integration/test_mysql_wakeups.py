"""MySQL/MariaDB waiters are woken by the holder's release gate (a ``GET_LOCK`` the holder's
session holds until its release), across clients, not by polling."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from typing import Any

import pytest

import tenure
from tenure._types import Busy, Grant, Kind, LeaseSpec
from tenure.backends.mysql._sync import MySQLAttempt, MySQLStore
from tests.integration.sql_support import mysql_connection

pytestmark = pytest.mark.mysql

LONG = 20.0
"""A wait far longer than any wake-up takes (the URL's statement timeout is above it)."""


def _url(mysql_url: str) -> str:
    return mysql_url + ("&" if "?" in mysql_url else "?") + "timeout=30"


LOCK = LeaseSpec()


def _refused(
    store: MySQLStore, name: str, token: str = "a" * 32
) -> tuple[MySQLAttempt, Busy]:
    """A lock attempt refused once: it knows the holder's gate, to wait on next."""
    attempt = store.attempt(name, LOCK, token, 10.0, tenure.Holder("host", 1, "thread"))
    assert isinstance(attempt, MySQLAttempt)
    busy = attempt.try_once()
    assert isinstance(busy, Busy)
    return attempt, busy


def test_a_release_in_another_client_wakes_a_blocked_waiter(mysql_url: str, name: str) -> None:
    """The waiter blocks (a fallback pause would return within 0.05 s) and returns on the
    release by another client, long before its timeout."""
    url = _url(mysql_url)
    with tenure.connect(url) as holder_client, tenure.connect(url) as waiting:
        held = holder_client.lock(name, ttl=60)
        assert held.acquire()
        attempt, busy = _refused(waiting.backend, name)
        returned = threading.Event()

        def wait() -> None:
            attempt.wait(LONG, busy)
            returned.set()

        thread = threading.Thread(target=wait)
        thread.start()
        assert not returned.wait(0.5), "the waiter did not block on the gate"
        started = time.monotonic()
        held.release()
        assert returned.wait(LONG / 2), "the release did not wake the waiter"
        assert time.monotonic() - started < LONG / 2
        thread.join()


def test_release_between_refusal_and_wait_is_not_missed(mysql_url: str, name: str) -> None:
    """The gate is a level, not an edge: released before the wait starts, it stays open and
    the wait returns at once instead of sleeping through it."""
    url = _url(mysql_url)
    with tenure.connect(url) as holder_client, tenure.connect(url) as waiting:
        held = holder_client.lock(name, ttl=60)
        assert held.acquire()
        attempt, busy = _refused(waiting.backend, name)
        held.release()
        started = time.monotonic()
        attempt.wait(LONG, busy)
        assert time.monotonic() - started < LONG / 2


def test_a_blocked_acquire_tries_a_few_times_and_wakes_on_the_release(
    mysql_url: str, name: str
) -> None:
    """A waiter in another client blocks instead of polling: over a 2 s hold it tries a
    handful of times (a 0.25-0.5 s wait each), where back-off of at most 0.05 s would try
    40 times or more; and the release hands it the lock."""
    url = _url(mysql_url)
    with tenure.connect(url) as holder_client, tenure.connect(url) as waiting:
        held = holder_client.lock(name, ttl=60)
        assert held.acquire()
        table = waiting.backend.store
        attempts = 0
        acquire = table.acquire

        def counted(*args: Any, **kwargs: Any) -> Grant | Busy:
            nonlocal attempts
            attempts += 1
            outcome: Grant | Busy = acquire(*args, **kwargs)
            return outcome

        table.acquire = counted
        got = threading.Event()

        def wait() -> None:
            lock = waiting.lock(name, ttl=60)
            assert lock.acquire(timeout=LONG)
            got.set()
            lock.release()

        thread = threading.Thread(target=wait)
        thread.start()
        assert not got.wait(2.0)
        held.release()
        assert got.wait(LONG / 2)
        thread.join()
        assert 2 <= attempts <= 12, attempts


def test_a_holder_whose_connection_dies_leaves_waiters_on_back_off(
    mysql_url: str, name: str
) -> None:
    """The holder's gate session is killed: its waiter wakes (a spurious wake-up), finds no
    gate and falls back to back-off; the holder's release still frees the lease (on a pool
    connection) and the waiter gets it."""
    url = _url(mysql_url)
    with tenure.connect(url) as holder_client, tenure.connect(url) as waiting:
        held = holder_client.lock(name, ttl=60)
        assert held.acquire()
        backend = holder_client.backend
        assert isinstance(backend, MySQLStore)
        gate = backend.store.locks._gate(name)
        admin = mysql_connection(url, autocommit=True)
        try:
            with admin.cursor() as cursor:
                cursor.execute("SELECT IS_USED_LOCK(%s)", (gate,))
                (session,) = cursor.fetchone()
                assert session is not None, "the grant took no gate"
                got = threading.Event()

                def wait() -> None:
                    lock = waiting.lock(name, ttl=60)
                    assert lock.acquire(timeout=LONG)
                    got.set()
                    lock.release()

                thread = threading.Thread(target=wait)
                thread.start()
                time.sleep(0.3)
                cursor.execute(f"KILL {int(session)}")
                # The killed session no longer holds the gate (the waiter's own GET_LOCK may
                # hold it for an instant as it wakes: another session, so it counts as gone).
                deadline = time.monotonic() + 10
                while True:
                    cursor.execute("SELECT IS_USED_LOCK(%s)", (gate,))
                    if cursor.fetchone()[0] != session:
                        break
                    assert time.monotonic() < deadline, "the killed session kept the gate"
                    time.sleep(0.01)
        finally:
            admin.close()
        assert not got.wait(0.5), "the lease row, not the gate, says who holds the lock"
        held.release()
        assert got.wait(LONG / 2)
        thread.join()


def test_asyncio_waiter_is_woken_by_the_gate(mysql_url: str, name: str) -> None:
    """The same wake-up under asyncio: the gate wait runs in a worker thread."""
    url = _url(mysql_url)

    async def main() -> None:
        async with (
            tenure.connect_async(url) as holder_client,
            tenure.connect_async(url) as waiting,
        ):
            held = holder_client.lock(name, ttl=60)
            assert await held.acquire()
            attempt = waiting.backend.attempt(
                name, LOCK, "b" * 32, 10.0, tenure.Holder("h", 1, "t")
            )
            busy = await attempt.try_once()
            assert isinstance(busy, Busy)
            task = asyncio.create_task(attempt.wait(LONG, busy))
            await asyncio.sleep(0.5)
            assert not task.done(), "the waiter did not block on the gate"
            await held.release()
            await asyncio.wait_for(task, LONG / 2)

    asyncio.run(main())


def test_a_lease_granted_after_an_expired_one_inherits_its_gate(
    mysql_url: str, name: str
) -> None:
    """A lease that expired without a release leaves its gate held by its client's session;
    the client's next lease of that name (granted, so the old one is over) takes that gate
    over, and its release wakes a waiter in another client."""
    url = _url(mysql_url)
    holder = tenure.Holder("host", 1, "thread")
    with tenure.connect(url) as holder_client, tenure.connect(url) as waiting:
        backend = holder_client.backend
        assert isinstance(backend.acquire(name, LOCK, "a" * 32, 0.2, holder), Grant)
        time.sleep(0.4)  # expired, never released
        assert isinstance(backend.acquire(name, LOCK, "b" * 32, 60.0, holder), Grant)
        attempt, busy = _refused(waiting.backend, name, "c" * 32)
        returned = threading.Event()

        def wait() -> None:
            attempt.wait(LONG, busy)
            returned.set()

        thread = threading.Thread(target=wait)
        thread.start()
        assert not returned.wait(0.5), "the waiter did not block on the gate"
        assert backend.release(Kind.LOCK, name, "b" * 32)
        assert returned.wait(LONG / 2), "the release did not open the inherited gate"
        thread.join()
        assert not backend.release(Kind.LOCK, name, "a" * 32)


def test_a_forked_child_leaves_the_parents_gate_alone(mysql_url: str, name: str) -> None:
    """A child forked while its parent holds a lease uses the client (refused) and closes it:
    the parent's gate session survives, and the parent's release still opens it."""
    url = _url(mysql_url)
    with tenure.connect(url) as locks:
        held = locks.lock(name, ttl=60)
        assert held.acquire()
        backend = locks.backend
        assert isinstance(backend, MySQLStore)
        gate = backend.store.locks._gate(name)
        pid = os.fork()
        if pid == 0:  # the child: refused, then closes everything it has
            code = 1
            try:
                code = 0 if not locks.lock(name, ttl=60).acquire(blocking=False) else 2
                locks.close()
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        with tenure.connect(url) as other:
            attempt, busy = _refused(other.backend, name)
            assert attempt.gate_wait is not None and attempt.gate_wait.gate == gate, (
                "the child's exit opened the parent's gate"
            )
            held.release()
            started = time.monotonic()
            attempt.wait(LONG, busy)
            assert time.monotonic() - started < LONG / 2
