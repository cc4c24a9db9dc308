"""The test suite's backend table (tests/backends.py) agrees with the registry, the server
modules and the markers: no backend is registered without tests, and none is named in a
second list."""

from __future__ import annotations

import importlib
import pathlib
import subprocess
import sys
import tomllib

import pytest

from tenure._registry import builtin_backends
from tests import backends
from tests.backends import BACKENDS, NAMES

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_every_registered_backend_package_has_a_row_and_every_row_a_package() -> None:
    registered = {entry.package.rpartition(".")[2] for entry in builtin_backends().values()}
    tested = {backend.package for backend in BACKENDS}  # LookupError: a scheme nobody serves
    assert tested == registered


def test_every_networked_backend_says_where_its_server_is_away() -> None:
    """tests/integration/test_unreachable_servers.py runs on each row with an ``unreachable``
    URL: a networked backend's row must have one (a local store has no server)."""
    for backend in BACKENDS:
        assert (backend.unreachable is None) == backend.local, backend.name
        if backend.unreachable is not None:
            assert backend.unreachable.url.startswith(f"{backend.scheme}://"), backend.name


def test_names_and_fixtures_are_unique() -> None:
    assert len(set(NAMES)) == len(BACKENDS)
    assert len({backend.fixture for backend in BACKENDS}) == len(BACKENDS)


@pytest.mark.parametrize("backend", BACKENDS, ids=NAMES)
def test_each_fixture_is_defined_by_its_server_module(backend: backends.BackendRow) -> None:
    module = importlib.import_module(backend.servers)
    assert callable(getattr(module, backend.fixture, None)), (backend.servers, backend.fixture)


def test_the_markers_are_the_tables_and_written_nowhere_else(
    pytestconfig: pytest.Config,
) -> None:
    lines = pytestconfig.getini("markers")
    registered = [line.partition(":")[0].strip() for line in lines]
    for backend in BACKENDS:
        assert registered.count(backend.name) == 1, backend.name
        assert backend.marker in lines
    # pyproject.toml keeps only the markers that are not backends.
    written = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"][
        "ini_options"]["markers"]
    assert [line for line in written if line.partition(":")[0] in NAMES] == []


def test_the_server_plugins_are_the_tables() -> None:
    from tests import conftest

    assert set(backends.server_modules()) <= set(conftest.pytest_plugins)


def test_choosing_backends() -> None:
    assert backends.choose("all") == list(NAMES)
    assert backends.choose(" redis , sqlite,") == ["redis", "sqlite"]
    with pytest.raises(ValueError, match=r"unknown backend\(s\) \['nope'\]; known: memory, "):
        backends.choose("sqlite,nope")
    with pytest.raises(KeyError, match="unknown backend 'nope'"):
        backends.row("nope")


def test_what_the_servers_need_installed_is_seen_installed() -> None:
    # This machine runs every backend's servers: a probe that misses what is there is wrong.
    needed = {package for backend in BACKENDS for package in backend.system}
    assert {package.apt for package in needed if not package.installed()} == set()
    assert backends.missing_packages() == []
    absent = backends.SystemPackage("absent", ("no-such-command", "/no/such/*/path",
                                               "libno-such.so.9"))
    assert not absent.installed()


def test_install_servers_reads_the_table() -> None:
    # scripts/install-servers runs it with any Python 3.11, before tenure is installed.
    done = subprocess.run([sys.executable, "-m", "tests.backends", "setup"], cwd=ROOT,
                          capture_output=True, text=True, check=True)
    assert done.stdout.split() == backends.setup_scripts() == ["scripts/install-mongoeco"]
    assert all((ROOT / script).is_file() for script in backends.setup_scripts())
    wrong = subprocess.run([sys.executable, "-m", "tests.backends", "nope"], cwd=ROOT,
                           capture_output=True, text=True, check=False)
    assert wrong.returncode == 2
    assert "tests.backends apt" in (ROOT / "scripts" / "install-servers").read_text()
