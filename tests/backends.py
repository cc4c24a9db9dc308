"""The backends the tests run on, each named once: every list of backends outside the
registry reads this table.

A row is what the product's registry (``tenure._registry``) cannot know: how the tests
reach a backend. Its name is the pytest marker, the test id, the ``--backends`` word of
pytest and of the safety harness; its scheme is one the registry serves (the row's backend
package and extra are the registry's, read from it); its fixture returns the URL of a
ready server, defined in its server module (loaded by tests/conftest.py as a pytest
plugin). One package may have several rows: Redis alone and Redis Cluster are one package,
two servers.

Read by tests/conftest.py (the conformance parameters, ``--backends``, the markers, the
server plugins), the safety harness (``python -m safety --backends``, which package a name
is), tests/unit/test_packaging.py, scripts/guarantees.py (the docs table's order),
scripts/install-servers (what the servers need installed: ``python -m tests.backends apt``)
and tests/integration/test_unreachable_servers.py (each networked backend's server away);
tests/unit/test_backend_table.py checks it against the registry, the server modules and
pyproject.toml. Adding a backend's tests is adding a row.

Imports only the standard library at load (the safety harness and scripts read it too);
``pytest`` and ``tenure`` are imported where a row is turned into them.
"""

from __future__ import annotations

import dataclasses
import glob
import shutil
import subprocess
import sys
from collections.abc import Callable
from typing import Any

__all__ = [
    "BACKENDS",
    "NAMES",
    "BackendRow",
    "SystemPackage",
    "Unreachable",
    "choose",
    "missing_packages",
    "row",
    "server_modules",
    "setup_scripts",
]


@dataclasses.dataclass(frozen=True, slots=True)
class SystemPackage:
    """A Debian package a backend's servers need, and how to tell it is there."""

    apt: str
    provides: tuple[str, ...]
    """Any one of these shows it installed: a command on PATH, an absolute path (a glob:
    Debian puts PostgreSQL under /usr/lib/postgresql/<major>/bin), or a shared library's
    file name (``libpq.so.5``) that ldconfig knows."""

    def installed(self) -> bool:
        return any(_present(probe) for probe in self.provides)


def _present(probe: str) -> bool:
    if probe.startswith("/"):
        return bool(glob.glob(probe))
    if ".so" in probe:
        ldconfig = shutil.which("ldconfig") or "/sbin/ldconfig"
        try:
            known = subprocess.run([ldconfig, "-p"], capture_output=True, text=True,
                                   check=False).stdout
        except OSError:
            return False
        return any(line.strip().startswith(f"{probe} ") for line in known.splitlines())
    return shutil.which(probe) is not None


@dataclasses.dataclass(frozen=True, slots=True)
class Unreachable:
    """How to name a networked backend's server where none answers: what an acquire then
    raises is checked on every row that has one (tests/integration/test_unreachable_servers.py)."""

    url: str
    """A URL of the row's scheme, each ``{}`` a port of its own, free (nothing listens)."""
    timeout: bool = True
    """The backend takes the ``timeout`` option, which bounds each of its driver's calls
    (False: the driver is refused at once, a closed port needs no bound)."""

    def at(self, free_port: Callable[[], int]) -> str:
        """The URL, with a port from ``free_port()`` for each ``{}``."""
        return self.url.format(*(free_port() for _ in range(self.url.count("{}"))))


@dataclasses.dataclass(frozen=True, slots=True)
class BackendRow:
    name: str
    """The pytest marker, test id and ``--backends`` word."""
    scheme: str
    """A URL scheme the registry serves for it (the backend package and extra come from the
    registry's entry for this scheme)."""
    fixture: str
    """The fixture returning the URL of a ready server (or store)."""
    servers: str
    """The module defining ``fixture``: a pytest plugin of tests/conftest.py."""
    needs: str
    """What the marker says the tests need, for ``pytest --markers``."""
    system: tuple[SystemPackage, ...] = ()
    """What its servers need installed (scripts/install-servers installs the missing)."""
    setup: str | None = None
    """A script installing what apt cannot (run by scripts/install-servers)."""
    unreachable: Unreachable | None = None
    """Its server where none answers; every networked backend has one (tests/unit/
    test_backend_table.py checks), the in-process and on-host stores none."""

    @property
    def marker(self) -> str:
        """The marker's line, as pytest's ``markers`` setting reads it."""
        return f"{self.name}: {self.needs}"

    @property
    def package(self) -> str:
        """The backend package's name under ``tenure.backends`` (``redis`` for
        ``redis_cluster``), from the registry."""
        from tenure._registry import builtin_backends

        entry = builtin_backends().get(self.scheme)
        if entry is None:
            raise LookupError(f"no built-in backend serves {self.scheme}:// (row {self.name!r})")
        return entry.package.rpartition(".")[2]

    @property
    def extra(self) -> str | None:
        """The pip extra installing its driver, from the registry."""
        from tenure._registry import builtin_backends

        return builtin_backends()[self.scheme].extra

    @property
    def local(self) -> bool:
        """Its store is in this process or a file on this host (the store's ``local``): no
        server that could be away. Imports the backend's driver."""
        from tenure._urls import load_backend_module

        return bool(load_backend_module(f"{self.scheme}://", "_sync").BACKEND.local)

    def param(self) -> Any:
        """A ``pytest.param`` of this backend (value and id: its name), carrying its marker,
        so that ``-m redis`` and ``-k redis`` select it."""
        import pytest

        return pytest.param(self.name, id=self.name, marks=getattr(pytest.mark, self.name))


_REDIS = SystemPackage("redis-server", ("redis-server",))

# The order the docs introduce them in: conformance ids, the safety record and the
# guarantees table list them so.
BACKENDS: tuple[BackendRow, ...] = (
    BackendRow("memory", "memory", "memory_url", "tests.servers.local",
               "runs on the in-process memory backend"),
    BackendRow("sqlite", "sqlite", "sqlite_url", "tests.servers.local",
               "runs on the embedded SQLite backend"),
    BackendRow("redis", "redis", "redis_url", "tests.servers.redis",
               "needs a real redis-server", (_REDIS,),
               unreachable=Unreachable("redis://127.0.0.1:{}/0", timeout=False)),
    BackendRow("redis_cluster", "redis+cluster", "redis_cluster_url", "tests.servers.redis",
               "needs a real 3-master Redis Cluster",
               # redis-cli --cluster create joins the nodes.
               (_REDIS, SystemPackage("redis-tools", ("redis-cli",))),
               unreachable=Unreachable("redis+cluster://127.0.0.1:{}", timeout=False)),
    BackendRow("redlock", "redlock", "redlock_url", "tests.servers.redlock",
               "needs several real redis-server nodes", (_REDIS,),
               unreachable=Unreachable(
                   "redlock://127.0.0.1:{},127.0.0.1:{},127.0.0.1:{}", timeout=False)),
    # No real mongod can be installed here: a Python 3.13 venv of its own.
    BackendRow("mongodb", "mongodb", "mongodb_collection_url", "tests.servers.mongodb",
               "needs the mongoeco MongoDB stand-in", setup="scripts/install-mongoeco",
               unreachable=Unreachable("mongodb://127.0.0.1:{}/db?directConnection=true")),
    BackendRow("mysql", "mysql", "mysql_url", "tests.servers.mysql",
               "needs a real mariadbd",
               (SystemPackage("mariadb-server", ("mariadbd", "/usr/sbin/mariadbd")),),
               unreachable=Unreachable("mysql://root@127.0.0.1:{}/db")),
    BackendRow("postgresql", "postgresql", "postgresql_url", "tests.servers.postgresql",
               "needs a real PostgreSQL", (
                   SystemPackage("postgresql", ("/usr/lib/postgresql/*/bin/postgres",)),
                   # The postgresql extra's psycopg is pure Python: it loads the system's.
                   SystemPackage("libpq5", ("libpq.so.5",)),
                   # The server runs as the postgres user.
                   SystemPackage("util-linux", ("runuser",)),
               ),
               unreachable=Unreachable("postgresql://postgres@127.0.0.1:{}/db")),
    BackendRow("etcd", "etcd", "etcd_url", "tests.servers.etcd",
               "needs a real 3-node etcd cluster", (
                   SystemPackage("etcd-server", ("etcd",)),
                   # The TLS tests make a throwaway CA and certificates with it.
                   SystemPackage("openssl", ("openssl",)),
               ),
               unreachable=Unreachable("etcd://127.0.0.1:{}")),
    BackendRow("zookeeper", "zookeeper", "zookeeper_url", "tests.servers.zookeeper",
               "needs a real 3-node ZooKeeper ensemble", (
                   SystemPackage("zookeeper", ("/usr/share/java/zookeeper.jar",)),
                   SystemPackage("default-jre-headless", ("java",)),
               ),
               unreachable=Unreachable("zookeeper://127.0.0.1:{}")),
)

NAMES: tuple[str, ...] = tuple(backend.name for backend in BACKENDS)

_BY_NAME = {backend.name: backend for backend in BACKENDS}


def row(name: str) -> BackendRow:
    """The row named ``name``; KeyError naming the known ones if there is none."""
    try:
        return _BY_NAME[name]
    except KeyError:
        raise KeyError(f"unknown backend {name!r}; known: {', '.join(NAMES)}") from None


def choose(text: str) -> list[str]:
    """The names a ``--backends`` value asks for: ``all``, or comma-separated names (in the
    order given). ValueError naming the unknown ones and the known."""
    if text == "all":
        return list(NAMES)
    names = [part.strip() for part in text.split(",") if part.strip()]
    unknown = [name for name in names if name not in _BY_NAME]
    if unknown:
        raise ValueError(f"unknown backend(s) {unknown}; known: {', '.join(NAMES)}")
    return names


def server_modules() -> list[str]:
    """Every row's server module, once each, in table order."""
    return list(dict.fromkeys(backend.servers for backend in BACKENDS))


def missing_packages() -> list[str]:
    """The apt packages of every row's servers that are not installed, once each."""
    packages = dict.fromkeys(package for backend in BACKENDS for package in backend.system)
    return [package.apt for package in packages if not package.installed()]


def setup_scripts() -> list[str]:
    """Every row's setup script, once each."""
    return list(dict.fromkeys(backend.setup for backend in BACKENDS if backend.setup))


def main(argv: list[str]) -> int:
    """``apt``: the missing apt packages, one a line; ``setup``: the setup scripts (both for
    scripts/install-servers, which runs with no tenure installed yet)."""
    if argv in (["apt"], ["setup"]):
        for line in missing_packages() if argv == ["apt"] else setup_scripts():
            print(line)
        return 0
    print("usage: python -m tests.backends apt|setup", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
