"""A driver installed below the floor its extra states is refused when its backend is first
used, with a ConfigurationError naming the floor, the version found and the extra to install:
not a TypeError or AttributeError from deep inside the first call (as redis-py 5.x-7.x did
when the floor was 8.0.1). The floors are read from tenure's installed metadata
(pyproject.toml's extras), so they are written once; the installed versions are stood in for
here, one driver at a time."""

from __future__ import annotations

import pathlib
import sqlite3
from collections.abc import Iterator

import pytest

import tenure
from tenure import _observe, _registry

# scheme -> (URL, the extra, the distribution, a release below its floor)
DRIVERS = {
    "redis": ("redis://127.0.0.1:1/0", "redis", "redis", "5.2.1"),
    "rediss": ("rediss://127.0.0.1:1/0", "redis", "redis", "4.6.0"),
    "redlock": ("redlock://127.0.0.1:1,127.0.0.1:2,127.0.0.1:3", "redis", "redis", "5.3.0"),
    "mongodb": ("mongodb://127.0.0.1:1/db", "mongodb", "pymongo", "4.8.0"),
    "mysql": ("mysql://root@127.0.0.1:1/db", "mysql", "PyMySQL", "0.9.3"),
    "postgresql": ("postgresql://u@127.0.0.1:1/db", "postgresql", "psycopg", "3.0b1"),
    "etcd": ("etcd://127.0.0.1:1", "etcd", "httpx", "0.23.0"),
    "zookeeper": ("zookeeper://127.0.0.1:1", "zookeeper", "kazoo", "2.6.1"),
}


@pytest.fixture(autouse=True)
def fresh_floors() -> Iterator[None]:
    _registry.unmet_floors.cache_clear()
    _registry.unmet_implementation_floors.cache_clear()
    _observe._instruments.cache_clear()
    yield
    _registry.unmet_floors.cache_clear()
    _registry.unmet_implementation_floors.cache_clear()
    _observe._instruments.cache_clear()


def installed_as(monkeypatch: pytest.MonkeyPatch, distribution: str, version: str) -> None:
    real = _registry._installed_version

    def version_of(name: str) -> str | None:
        return version if name.lower() == distribution.lower() else real(name)

    monkeypatch.setattr(_registry, "_installed_version", version_of)


def test_the_floors_come_from_the_installed_metadata() -> None:
    # Without it (a source tree never installed) nothing could be checked.
    for _, extra, distribution, _ in DRIVERS.values():
        requirements = _registry.extra_requirements(extra)
        assert any(r.lower().startswith(distribution.lower() + ">=") for r in requirements), (
            extra, requirements)


@pytest.mark.parametrize("scheme", sorted(DRIVERS))
@pytest.mark.parametrize("flavour", ["sync", "async"])
def test_a_driver_below_its_floor_is_refused(
    monkeypatch: pytest.MonkeyPatch, scheme: str, flavour: str
) -> None:
    url, extra, distribution, old = DRIVERS[scheme]
    installed_as(monkeypatch, distribution, old)
    (floor,) = [r for r in _registry.extra_requirements(extra)
                if r.lower().startswith(distribution.lower())]
    connect = tenure.connect if flavour == "sync" else tenure.connect_async
    with pytest.raises(tenure.ConfigurationError) as raised:
        connect(url)
    message = str(raised.value)
    assert floor in message and f"{old} is installed" in message, message
    assert f"tenure[{extra}]" in message, message


@pytest.mark.parametrize("scheme", sorted(DRIVERS))
def test_a_driver_at_its_floor_is_accepted(monkeypatch: pytest.MonkeyPatch, scheme: str) -> None:
    url, extra, distribution, _ = DRIVERS[scheme]
    (floor,) = [r for r in _registry.extra_requirements(extra)
                if r.lower().startswith(distribution.lower())]
    installed_as(monkeypatch, distribution, floor.partition(">=")[2])
    tenure.connect(url).close()  # connecting sends nothing


@pytest.mark.parametrize(
    ("installed", "floor", "refused"),
    [("8.0.0", "8.0.1", True), ("8.0.1rc1", "8.0.1", True), ("8.0.1", "8.0.1", False),
     ("8.1", "8.0.1", False), ("10.0", "8.0.1", False), ("3.0", "3.0.0", False),
     ("1.16.0.post1", "1.16", False), ("0.9.99", "0.10", True)],
)
def test_version_order(installed: str, floor: str, refused: bool) -> None:
    have, need = _registry._version_key(installed), _registry._version_key(floor)
    assert have is not None and need is not None
    assert (have < (need[0], True)) is refused


def test_an_old_opentelemetry_api_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    # tenure uses the OpenTelemetry API whenever it is installed: too old a one is refused at
    # connect, naming the floor and the extra, rather than failing inside an acquire.
    installed_as(monkeypatch, "opentelemetry-api", "1.15.0")
    expected = r"opentelemetry-api>=1\.16 \(1\.15\.0 is installed\).*tenure\[otel\]"
    with pytest.raises(tenure.ConfigurationError, match=expected):
        tenure.connect("memory://")


def installed_as_many(monkeypatch: pytest.MonkeyPatch, versions: dict[str, str | None]) -> None:
    real = _registry._installed_version
    lowered = {name.lower(): version for name, version in versions.items()}

    def version_of(name: str) -> str | None:
        return lowered[name.lower()] if name.lower() in lowered else real(name)

    monkeypatch.setattr(_registry, "_installed_version", version_of)


REDIS_URLS = ["redis://127.0.0.1:1/0", "redis+cluster://127.0.0.1:1",
              "redis+sentinel://127.0.0.1:1/svc", "redlock://127.0.0.1:1,127.0.0.1:2,127.0.0.1:3"]


@pytest.mark.parametrize("url", REDIS_URLS)
@pytest.mark.parametrize("flavour", ["sync", "async"])
def test_an_installed_hiredis_below_its_floor_is_refused(
    monkeypatch: pytest.MonkeyPatch, url: str, flavour: str
) -> None:
    # redis-py parses every reply with hiredis whenever it is installed: the hiredis extra's
    # floor holds then, though the redis extra does not list it.
    (floor,) = [r for r in _registry.extra_requirements("hiredis") if r.startswith("hiredis")]
    installed_as_many(monkeypatch, {"hiredis": "3.0.0", "redis": "8.1.0"})
    connect = tenure.connect if flavour == "sync" else tenure.connect_async
    with pytest.raises(tenure.ConfigurationError) as raised:
        connect(url)
    message = str(raised.value)
    assert f"{floor} (3.0.0 is installed)" in message and "tenure[hiredis]" in message, message


@pytest.mark.parametrize("hiredis", [None, "3.2", "3.5.0"])
def test_hiredis_absent_or_at_its_floor_is_accepted(
    monkeypatch: pytest.MonkeyPatch, hiredis: str | None
) -> None:
    installed_as_many(monkeypatch, {"hiredis": hiredis, "redis": "5.3.1"})
    for url in REDIS_URLS:
        tenure.connect(url).close()


@pytest.mark.parametrize("flavour", ["sync", "async"])
@pytest.mark.parametrize(
    ("psycopg", "binary", "refused"),
    [("3.1.3", "3.1.3", "psycopg>=3.1.4 (3.1.3 is installed)"),  # the pinned pair, too old
     ("3.2.1", "3.1.2", "psycopg-binary>=3.1.4 (3.1.2 is installed)")],  # installed apart
)
def test_psycopg_binary_below_its_floor_is_refused(
    monkeypatch: pytest.MonkeyPatch, flavour: str, psycopg: str, binary: str, refused: str
) -> None:
    # psycopg runs on psycopg-binary whenever it is installed: tenure[postgresql-binary]'s
    # floor (psycopg[binary]>=3.1.4) holds then.
    installed_as_many(monkeypatch, {"psycopg": psycopg, "psycopg-binary": binary})
    connect = tenure.connect if flavour == "sync" else tenure.connect_async
    with pytest.raises(tenure.ConfigurationError) as raised:
        connect("postgresql://u@127.0.0.1:1/db")
    message = str(raised.value)
    assert refused in message and "tenure[postgresql-binary]" in message, message


def test_plain_psycopg_below_the_binary_floor_is_accepted(monkeypatch: pytest.MonkeyPatch) -> None:
    # Without psycopg-binary the postgresql extra's own floor (3.0) is the one that holds.
    installed_as_many(monkeypatch, {"psycopg": "3.0", "psycopg-binary": None})
    tenure.connect("postgresql://u@127.0.0.1:1/db").close()
    installed_as_many(monkeypatch, {"psycopg": "3.1.4", "psycopg-binary": "3.1.4"})
    tenure.connect("postgresql://u@127.0.0.1:1/db").close()


@pytest.mark.parametrize("flavour", ["sync", "async"])
@pytest.mark.parametrize("library", ["3.34.1", "3.24.0", "3.7.17"])
def test_an_old_sqlite_library_is_refused(
    monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path, flavour: str, library: str
) -> None:
    # The SQLite wing's SQL needs RETURNING (3.35.0): an older library would fail at the
    # first statement with a syntax error. Refused at connect, naming both versions.
    monkeypatch.setattr(sqlite3, "sqlite_version", library)
    connect = tenure.connect if flavour == "sync" else tenure.connect_async
    with pytest.raises(tenure.ConfigurationError) as raised:
        connect(f"sqlite:///{tmp_path}/locks.db")
    message = str(raised.value)
    assert f"SQLite {library}" in message and "3.35.0 or later" in message, message
    assert not (tmp_path / "locks.db").exists()


@pytest.mark.parametrize("library", ["3.35.0", "3.35.5", "3.40.1", "3.50.4"])
def test_a_sqlite_library_at_or_above_the_minimum_is_accepted(
    monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path, library: str
) -> None:
    monkeypatch.setattr(sqlite3, "sqlite_version", library)
    tenure.connect(f"sqlite:///{tmp_path}/locks.db").close()


def test_the_sqlite_minimum_is_the_documented_one() -> None:
    from tenure.backends.sqlite._config import MINIMUM_SQLITE

    minimum = ".".join(map(str, MINIMUM_SQLITE))
    docs = pathlib.Path(__file__).parents[2] / "docs"
    for page in ("backends/sqlite.md", "index.md"):
        assert f"SQLite {minimum}" in (docs / page).read_text(), page
