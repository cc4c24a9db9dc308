"""``tenure break`` / ``show`` / ``ls`` when the name is not what the operator assumed, and
names a table must not garble; in-process against a ``memory://`` store this test fills."""

from __future__ import annotations

import pytest

import tenure
from tenure.cli.main import main

URL = "memory://cli-views"


@pytest.fixture
def locks() -> tenure.Locks:
    return tenure.connect(URL)


def run(capsys: pytest.CaptureFixture[str], *arguments: str) -> tuple[int, str]:
    status = main([*arguments, "--url", URL])
    return status, capsys.readouterr().out


def test_break_without_the_flag_names_the_primitive_that_holds_the_name(
    locks: tenure.Locks, name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    permits = [locks.semaphore(name, limit=3, ttl=60) for _ in range(2)]
    for permit in permits:
        assert permit.acquire()
    status, said = run(capsys, "break", name)
    assert status == 1  # nothing was broken: the operator asks again, with the flag
    assert said.splitlines() == [
        f"lock {name} was not held: nothing to break",
        f"{name} is held as a semaphore (2 of 3 permits held); to break it: "
        f"tenure break {name} --semaphore",
    ]
    assert all(permit.owned() for permit in permits)
    status, shown = run(capsys, "show", name)
    assert status == 0 and "kind:     semaphore" in shown and "2 of 3 permits held" in shown
    status, said = run(capsys, "break", name, "--semaphore")
    assert status == 0 and not any(permit.owned() for permit in permits)


def test_break_with_the_wrong_flag_names_the_right_one(
    locks: tenure.Locks, name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    lock = locks.lock(name, ttl=60)
    assert lock.acquire()
    status, said = run(capsys, "break", name, "--semaphore")
    assert status == 1
    assert f"{name} is held as a lock (1 lease held); to break it: tenure break {name}\n" in said
    lock.release()
    reader = locks.rwlock(name, ttl=60).read()
    assert reader.acquire()
    status, said = run(capsys, "break", name)
    assert status == 1
    assert (f"{name} is held as a read-write or fair lock (1 lease held); to break it: "
            f"tenure break {name} --rwlock") in said
    reader.release()
    status, said = run(capsys, "break", name)
    assert (status, said) == (1, f"lock {name} was not held: nothing to break\n")


def test_the_suggested_command_quotes_the_name(
    locks: tenure.Locks, capsys: pytest.CaptureFixture[str]
) -> None:
    permit = locks.semaphore("two words; rm", limit=1, ttl=60)
    assert permit.acquire()
    try:
        status, said = run(capsys, "break", "two words; rm")
        assert status == 1
        assert "tenure break 'two words; rm' --semaphore" in said
    finally:
        permit.release()
