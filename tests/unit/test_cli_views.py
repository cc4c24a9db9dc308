"""``tenure break`` / ``show`` / ``ls`` when the name is not what the operator assumed, and
names a table must not garble; in-process against a ``memory://`` store this test fills."""

from __future__ import annotations

import unicodedata

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
    assert (f"{name} is held as a read-write lock (1 lease held); to break it: "
            f"tenure break {name} --rwlock") in said
    reader.release()
    fair = locks.lock(name, ttl=60, fair=True)
    assert fair.acquire()
    status, said = run(capsys, "break", name)
    assert status == 1
    assert (f"{name} is held as a fair lock (1 lease held); to break it: "
            f"tenure break {name} --fair") in said
    fair.release()
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


def test_wide_characters_keep_the_columns_aligned(
    locks: tenure.Locks, name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # An emoji takes two columns on a terminal, as CJK does; each row's HOLDER column must
    # start at the same column as the header's.
    names = [f"{name}:🔒", f"{name}:ascii", f"{name}:日本"]
    held = [locks.lock(each, ttl=60) for each in names]
    for lease in held:
        assert lease.acquire()
    try:
        status, table = run(capsys, "ls", name)
    finally:
        for lease in held:
            lease.release()
    assert status == 0
    lines = table.splitlines()
    assert len(lines) == 4

    def columns(text: str) -> int:
        return sum(2 if unicodedata.east_asian_width(c) in ("W", "F") else 1 for c in text)

    starts = {columns(line[: line.index("lock ")]) for line in lines[1:]}
    assert starts == {columns(lines[0][: lines[0].index("KIND")])}


def test_ls_says_when_free_names_are_known_that_list_locks_returns(
    locks: tenure.Locks, name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # Locks.list_locks() answers every name the backend remembers, free ones included;
    # `tenure ls` shows what is held (--all: all of them), and says so rather than seeming
    # to disagree with the API.
    for each in (f"{name}:a", f"{name}:b"):
        lease = locks.lock(each, ttl=60)
        assert lease.acquire()
        lease.release()
    assert {info.name for info in locks.list_locks(name)} == {f"{name}:a", f"{name}:b"}
    status, said = run(capsys, "ls", name)
    assert (status, said) == (
        0, f"no held locks or semaphores with prefix {name} (2 free names known: tenure ls "
           "--all)\n",
    )
    status, said = run(capsys, "ls", name, "--all")
    assert said.count("(free)") == 2
