"""An acquire against a server that is not there raises BackendError with a ``__cause__``,
on every networked backend (each row of tests/backends.py with an ``unreachable`` URL: a new
backend's row brings it here), whichever ends the wait: the driver (its own error is the
cause) or the lock logic's deadline guard, when the caller's timeout comes first (the
driver's last error, or a TimeoutError saying that no answer came). The API promises the
cause; ZooKeeper and MongoDB once gave none. Nothing listens on the ports used: no server is
started. SQLite, whose store is a file on this host, fails the same way when its file
cannot be opened."""

from __future__ import annotations

import asyncio
import pathlib
import re
import shutil
import threading
from typing import Any

import pytest

import tenure
from tests.backends import BACKENDS, BackendRow, Unreachable
from tests.servers._process import free_port

NETWORKED: dict[str, Unreachable] = {
    row.name: row.unreachable for row in BACKENDS if row.unreachable is not None
}


def closed(backend: str) -> str:
    return NETWORKED[backend].at(free_port)


def bounded(backend: str) -> dict[str, Any]:
    """Options that bound the driver's calls (0.5 s), shorter than the caller's wait."""
    return {"timeout": 0.5} if NETWORKED[backend].timeout else {}


def check(error: tenure.BackendError) -> None:
    assert error.__cause__ is not None, error
    assert "127.0.0.1" in str(error), error


@pytest.mark.parametrize("backend", sorted(NETWORKED))
def test_the_deadline_guard_ends_the_wait(backend: str) -> None:
    # A 1 s caller's timeout: shorter than each driver's own (5 s or more by default).
    with tenure.connect(closed(backend)) as locks, pytest.raises(tenure.BackendError) as raised:
        locks.lock("unreachable:guard", ttl=5).acquire(timeout=1)
    check(raised.value)


@pytest.mark.parametrize("backend", sorted(NETWORKED))
def test_the_driver_ends_the_wait(backend: str) -> None:
    # tenure's timeout option (0.5 s) bounds the driver's calls; the caller waits longer.
    with tenure.connect(closed(backend), **bounded(backend)) as locks, pytest.raises(
        tenure.BackendError
    ) as raised:
        locks.lock("unreachable:driver", ttl=5).acquire(timeout=10)
    check(raised.value)


@pytest.mark.parametrize("backend", sorted(NETWORKED))
def test_asyncio_too(backend: str) -> None:
    # The driver ends the wait, as above (the guard's own code is the same generated code):
    # a wait the guard cancels mid-connect leaves anyio's happy-eyeballs coroutine unawaited
    # (httpx, etcd's driver), whose warning would fail whichever test ran next.
    async def attempt() -> None:
        async with tenure.connect_async(closed(backend), **bounded(backend)) as locks:
            await locks.lock("unreachable:async", ttl=5).acquire(timeout=10)

    with pytest.raises(tenure.BackendError) as raised:
        asyncio.run(attempt())
    check(raised.value)


@pytest.mark.parametrize("backend", sorted(NETWORKED))
def test_the_error_names_the_backend_the_action_and_the_lock(backend: str) -> None:
    """Every backend's driver errors leave through ``tenure._async.store.failure``: one way
    of reading, whichever backend, "<backend URL>: acquire of '<lock>' failed: <cause>"."""
    url = closed(backend)
    with tenure.connect(url, **bounded(backend)) as locks, pytest.raises(
        tenure.BackendError
    ) as raised:
        locks.lock("unreachable:named", ttl=5).acquire(timeout=10)
    message = str(raised.value)
    scheme = url.split("://", maxsplit=1)[0]
    # The URL as given, a user name included (only a password is redacted).
    assert re.match(rf"{re.escape(scheme)}://([^@/]+@)?127\.0\.0\.1:", message), message
    assert ": acquire of 'unreachable:named' failed: " in message, message
    assert raised.value.__cause__ is not None


def sqlite_row() -> BackendRow:
    (row,) = [row for row in BACKENDS if row.scheme == "sqlite"]
    return row


def test_a_sqlite_file_below_a_file_is_refused_naming_its_url(tmp_path: pathlib.Path) -> None:
    """SQLite opens its file on connect: a path that cannot be a file (below a regular file)
    is a ConfigurationError then, before any lock is named, that begins with the URL as every
    BackendError does."""
    (tmp_path / "plain").write_text("not a directory")
    url = f"{sqlite_row().scheme}:///{tmp_path}/plain/locks.db"
    with pytest.raises(tenure.ConfigurationError) as raised:
        tenure.connect(url)
    assert str(raised.value).startswith(f"{url}: "), raised.value
    assert f"no such directory {tmp_path / 'plain'}" in str(raised.value), raised.value


def test_a_sqlite_file_that_cannot_be_opened_fails_in_the_one_form(
    tmp_path: pathlib.Path,
) -> None:
    """Each thread opens its own connection to the file, on its first call: once the file's
    directory is gone, a thread that had none fails to open it (sqlite3's "unable to open
    database file"), and the acquire raises the one BackendError form."""
    directory = tmp_path / "gone"
    directory.mkdir()
    url = f"{sqlite_row().scheme}:///{directory}/locks.db"
    raised: list[BaseException] = []

    def acquire() -> None:
        try:
            locks.lock("unopenable:named", ttl=5).acquire(blocking=False)
        except BaseException as exc:
            raised.append(exc)

    with tenure.connect(url) as locks:
        shutil.rmtree(directory)
        thread = threading.Thread(target=acquire)
        thread.start()
        thread.join(30)
    assert len(raised) == 1 and isinstance(raised[0], tenure.BackendError), raised
    message = str(raised[0])
    assert message.startswith(f"{url}: acquire of 'unopenable:named' failed: "), message
    assert "unable to open database file" in message, message
    assert raised[0].__cause__ is not None
