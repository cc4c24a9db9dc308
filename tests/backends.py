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
is), tests/unit/test_packaging.py and scripts/guarantees.py (the docs table's order);
tests/unit/test_backend_table.py checks it against the registry, the server modules and
pyproject.toml. Adding a backend's tests is adding a row.

Imports only the standard library at load (the safety harness and scripts read it too);
``pytest`` and ``tenure`` are imported where a row is turned into them.
"""

from __future__ import annotations

import dataclasses
from typing import Any

__all__ = ["BACKENDS", "NAMES", "BackendRow", "choose", "row", "server_modules"]


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

    def param(self) -> Any:
        """A ``pytest.param`` of this backend (value and id: its name), carrying its marker,
        so that ``-m redis`` and ``-k redis`` select it."""
        import pytest

        return pytest.param(self.name, id=self.name, marks=getattr(pytest.mark, self.name))


# The order the docs introduce them in: conformance ids, the safety record and the
# guarantees table list them so.
BACKENDS: tuple[BackendRow, ...] = (
    BackendRow("memory", "memory", "memory_url", "tests.servers.local",
               "runs on the in-process memory backend"),
    BackendRow("sqlite", "sqlite", "sqlite_url", "tests.servers.local",
               "runs on the embedded SQLite backend"),
    BackendRow("redis", "redis", "redis_url", "tests.servers.redis",
               "needs a real redis-server"),
    BackendRow("redis_cluster", "redis+cluster", "redis_cluster_url", "tests.servers.redis",
               "needs a real 3-master Redis Cluster"),
    BackendRow("redlock", "redlock", "redlock_url", "tests.servers.redlock",
               "needs several real redis-server nodes"),
    BackendRow("mongodb", "mongodb", "mongodb_url", "tests.servers.mongodb",
               "needs the mongoeco MongoDB stand-in"),
    BackendRow("mysql", "mysql", "mysql_url", "tests.servers.mysql",
               "needs a real mariadbd"),
    BackendRow("postgresql", "postgresql", "postgresql_url", "tests.servers.postgresql",
               "needs a real PostgreSQL"),
    BackendRow("etcd", "etcd", "etcd_url", "tests.servers.etcd",
               "needs a real 3-node etcd cluster"),
    BackendRow("zookeeper", "zookeeper", "zookeeper_url", "tests.servers.zookeeper",
               "needs a real 3-node ZooKeeper ensemble"),
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
