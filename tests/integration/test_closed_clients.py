"""A client used after ``close()``, on the backends whose connections are gone for good
then (the others open again on use): the store refuses, in the one BackendError form, naming
the backend, the action and the lock ("<URL>: acquire of '<lock>' failed: <cause>"), never
a message of its own style. MySQL, PostgreSQL and MongoDB once began "MySQL <URL>: the client
is closed", without the action or the lock."""

from __future__ import annotations

import asyncio

import pytest

import tenure

REFUSING = ("redis", "redis_cluster", "redlock", "mongodb", "mysql", "postgresql")


def check(error: tenure.BackendError, described: str, name: str) -> None:
    assert str(error).startswith(f"{described}: acquire of {name!r} failed: "), error
    assert "client is closed" in str(error), error
    assert error.__cause__ is not None


def test_an_acquire_after_close_fails_in_the_one_form(backend_url: str, name: str) -> None:
    locks = tenure.connect(backend_url)
    with locks.lock(name, ttl=5):
        pass
    locks.close()
    with pytest.raises(tenure.BackendError) as raised:
        locks.lock(name, ttl=5).acquire(blocking=False)
    check(raised.value, locks.store.describe(), name)


def test_an_async_acquire_after_close_fails_in_the_one_form(
    backend_url: str, name: str
) -> None:
    async def closed_then_used() -> None:
        locks = tenure.connect_async(backend_url)
        async with locks.lock(name, ttl=5):
            pass
        await locks.aclose()
        with pytest.raises(tenure.BackendError) as raised:
            await locks.lock(name, ttl=5).acquire(blocking=False)
        check(raised.value, locks.store.describe(), name)

    asyncio.run(closed_then_used())


test_an_acquire_after_close_fails_in_the_one_form.backends = REFUSING  # type: ignore[attr-defined]
test_an_async_acquire_after_close_fails_in_the_one_form.backends = (  # type: ignore[attr-defined]
    REFUSING
)
