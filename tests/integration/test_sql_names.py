"""Names are data on real MariaDB and PostgreSQL: every hostile name maps to exactly one lock
(or is refused before the server), and the table name is checked before it reaches SQL."""

from __future__ import annotations

import asyncio
import unicodedata
import uuid

import pytest

import tenure
from tests.integration.sql_support import (
    SQL_BACKENDS,
    all_at_once,
    quote_table,
    raw,
    url_fixture,
)


@pytest.fixture(params=SQL_BACKENDS)
def sql_url(request: pytest.FixtureRequest) -> str:
    return url_fixture(request)


def hostile_names(prefix: str) -> list[str]:
    names = [
        "it's", 'say "hi"', "back\\slash", "trailing\\", "100%", "100", "a_b", "a%b", "axb",
        "semi;colon", "'); DROP TABLE tenure_locks; --", "`; DROP TABLE tenure_locks; --",
        '"; DROP TABLE tenure_locks; --', "$1", "%(name)s", "%s", "?", ":name", "{name}",
        "tab\there", "new\nline", "carriage\rreturn", "ctrl-z \x1a", "bell \x07",
        "ünïcödé", "名前", "lock 🔒", "a", "A", "a ", " a", "ß", "ss",
        unicodedata.normalize("NFC", "é"), unicodedata.normalize("NFD", "é"),
        "\u200b", "\ufeffbom", "right-to-left \u202e", "\\x00 not a NUL", "0x41",
    ]
    result = [prefix + name for name in names]
    room = 1024 - len(prefix.encode())
    result.append(prefix + "x" * room)  # exactly 1024 bytes
    result.append(prefix + "é" * (room // 2) + "y" * (room % 2))  # 1024 bytes, 2-byte chars
    result.append(prefix + "🔒" * (room // 4) + "z" * (room % 4))  # 1024 bytes, 4-byte chars
    return result


def test_hostile_names_each_map_to_exactly_one_lock(sql_url: str) -> None:
    prefix = f"names:{uuid.uuid4().hex}:"
    names = hostile_names(prefix)
    assert len(set(names)) == len(names)
    with tenure.connect(sql_url) as locks:
        held = []
        for name in names:
            lock = locks.lock(name, ttl=60)
            # Granted for every one: no two names landed on the same row.
            assert lock.acquire(blocking=False), name
            assert lock.fence is not None
            held.append(lock)
        for lock in held:
            info = locks.inspect(lock.name)
            assert info is not None and info.name == lock.name and info.held
            assert info.fence == lock.fence
            assert locks.lock(name, ttl=60).acquire(blocking=False) is False
        listed = locks.list_locks(prefix)
        assert [info.name for info in listed] == sorted(names, key=lambda n: n.encode())
        # A prefix is compared as plain text: % and _ are no wildcards, case counts.
        assert [i.name for i in locks.list_locks(prefix + "100%")] == [prefix + "100%"]
        assert [i.name for i in locks.list_locks(prefix + "a_")] == [prefix + "a_b"]
        assert [i.name for i in locks.list_locks(prefix + "A")] == [prefix + "A"]
        assert {i.name for i in locks.list_locks(prefix + "%")} == {
            prefix + "%(name)s", prefix + "%s"
        }
        assert locks.list_locks(prefix + "\x00") == []
        for lock in held:
            lock.release()
        assert not any(info.held for info in locks.list_locks(prefix))
    # The table is still there, and holds one row per name.
    count = raw(sql_url, "SELECT count(*) FROM tenure_locks WHERE name IN ("
                + ", ".join(["%s"] * len(names)) + ")",
                [n.encode() if not sql_url.startswith("postgres") else n for n in names])
    assert count == [(len(names),)]


def test_too_long_and_nul_names_are_refused_before_the_server(sql_url: str) -> None:
    with tenure.connect(sql_url) as locks:
        with pytest.raises(tenure.InvalidArgument, match="1025 bytes"):
            locks.lock("x" * 1025)
        with pytest.raises(tenure.InvalidArgument, match="1026 bytes"):
            locks.lock("é" * 513)
        with pytest.raises(tenure.InvalidArgument, match="NUL"):
            locks.lock("a\x00b")
        with pytest.raises(tenure.InvalidArgumentType):
            locks.lock(b"bytes")  # type: ignore[arg-type]


def test_names_reach_the_server_as_parameters_under_asyncio(sql_url: str) -> None:
    prefix = f"names:{uuid.uuid4().hex}:"

    async def main() -> None:
        async with tenure.connect_async(sql_url) as locks:
            for name in hostile_names(prefix):
                lock = locks.lock(name, ttl=60)
                assert await lock.acquire(blocking=False)
                info = await locks.inspect(name)
                assert info is not None and info.name == name and info.fence == lock.fence
                await lock.release()
            assert len(await locks.list_locks(prefix)) == len(hostile_names(prefix))

    asyncio.run(main())


@pytest.mark.parametrize("table", [
    "", "1abc", "a-b", "a b", 'a"b', "a`b", "a;b", "x" * 64, "tenure_locks; DROP TABLE x",
    "schema.table", "ünï", "a\x00",
])
def test_bad_table_names_are_refused(sql_url: str, table: str) -> None:
    with pytest.raises(tenure.ConfigurationError, match="plain identifier"):
        tenure.connect(sql_url, table=table)


def test_table_name_must_be_a_string(sql_url: str) -> None:
    with pytest.raises(tenure.ConfigurationError):
        tenure.connect(sql_url, table=5)


def test_custom_table_is_created_on_first_use(sql_url: str) -> None:
    table = f"Custom_{uuid.uuid4().hex[:12]}"
    separator = "&" if "?" in sql_url else "?"
    fences = []
    for url, options in ((f"{sql_url}{separator}table={table}", {}), (sql_url, {"table": table})):
        with tenure.connect(url, **options) as locks:
            lock = locks.lock("custom", ttl=10)
            assert lock.acquire(blocking=False)
            fences.append(lock.fence)
            lock.release()
    rows = raw(sql_url, f"SELECT fence FROM {quote_table(sql_url, table)}")
    # Both clients used the one table, named exactly as given: the second grant followed the
    # first on its one row.
    assert fences[0] is not None and fences[1] is not None and fences[1] > fences[0]
    assert rows == [(fences[1],)]


def test_many_clients_meeting_a_new_table_at_once_all_use_it(sql_url: str) -> None:
    """The first statements of many clients on a table nobody made yet: one makes it, the
    others wait for it and use it. On PostgreSQL a table being made can show (the latest
    catalog) before its comment does (the statement's snapshot), which once read as "not a
    tenure lock table" (ci20); a table without a mark is judged under the creation lock."""
    for _ in range(100):  # the old reading failed about one round in 200
        table = f"racing_{uuid.uuid4().hex[:12]}"

        def first_use(number: int, table: str = table) -> None:
            with tenure.connect(sql_url, table=table) as locks:
                assert locks.lock(f"r{number}", ttl=10).acquire(blocking=False)

        assert all_at_once(8, first_use) == []


def test_foreign_table_of_that_name_is_refused(sql_url: str) -> None:
    table = f"foreign_{uuid.uuid4().hex[:12]}"
    raw(sql_url, f"CREATE TABLE {quote_table(sql_url, table)} (name TEXT)")
    with tenure.connect(sql_url, table=table) as locks, pytest.raises(
        tenure.ConfigurationError, match="not a tenure lock table"
    ):
        locks.lock("x").acquire(blocking=False)


def test_table_from_a_newer_tenure_is_refused(sql_url: str) -> None:
    table = f"newer_{uuid.uuid4().hex[:12]}"
    with tenure.connect(sql_url, table=table) as locks:
        locks.lock("x", ttl=10).acquire(blocking=False)
    quoted = quote_table(sql_url, table)
    if sql_url.startswith("postgres"):
        raw(sql_url, f"COMMENT ON TABLE {quoted} IS 'tenure lock table, schema 99'")
    else:
        raw(sql_url, f"ALTER TABLE {quoted} COMMENT = 'tenure lock table, schema 99'")
    with tenure.connect(sql_url, table=table) as locks, pytest.raises(
        tenure.ConfigurationError, match="upgrade tenure"
    ):
        locks.lock("x").acquire(blocking=False)


@pytest.mark.smoke  # PyMySQL before 0.10 raises a note (table exists) as a warning
def test_dropped_table_is_created_again(sql_url: str) -> None:
    table = f"dropped_{uuid.uuid4().hex[:12]}"
    with tenure.connect(sql_url, table=table) as locks:
        first = locks.lock("x", ttl=10)
        assert first.acquire(blocking=False)
        raw(sql_url, f"DROP TABLE {quote_table(sql_url, table)}")
        # The first statement to meet the dropped table fails, and has the table made again
        # on the next one. That statement is the next acquire, unless a background clean-up
        # pass (PostgreSQL's, started by the first grant) met the drop first.
        try:
            lock = locks.lock("x", ttl=10)
            granted = lock.acquire(blocking=False)
        except tenure.BackendError:
            lock = locks.lock("x", ttl=10)
            granted = lock.acquire(blocking=False)
        assert granted
        assert first.fence is not None and lock.fence is not None
        if locks.backend.capabilities.fences_count_per_name:
            assert lock.fence == 1  # a new table: the counter restarts; don't drop it
        else:
            assert lock.fence > first.fence  # floored by the server's clock: never back
        lock.release()


@pytest.mark.parametrize("option", [
    {"timeout": 0}, {"timeout": "soon"}, {"pool_size": -1}, {"pool_size": 1.5},
    {"colour": "blue"},
])
def test_bad_options_are_refused(sql_url: str, option: dict[str, object]) -> None:
    with pytest.raises(tenure.ConfigurationError):
        tenure.connect(sql_url, **option)


def test_url_password_never_shows(sql_url: str) -> None:
    with_password = sql_url.replace("://", "://someone:hunter2@", 1) if "@" not in sql_url \
        else sql_url
    with tenure.connect(with_password) as locks:
        assert "hunter2" not in repr(locks)
        assert "hunter2" not in locks.backend.describe()
        if "s3cret" in sql_url:
            assert "s3cret" not in repr(locks)


@pytest.mark.mysql
def test_mysql_url_needs_a_database() -> None:
    for url in ("mysql://u:p@127.0.0.1:3306", "mysql://u:p@127.0.0.1:3306/", "mysql://h/a/b"):
        with pytest.raises(tenure.ConfigurationError, match="one database"):
            tenure.connect(url)


@pytest.mark.postgresql
def test_postgresql_url_is_checked_by_libpq() -> None:
    with pytest.raises(tenure.ConfigurationError, match="bad PostgreSQL URL"):
        tenure.connect("postgresql://127.0.0.1/db?no_such_libpq_option=1")
