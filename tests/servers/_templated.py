"""Fixtures of a SQL server started from a data-directory template: initialising a data
directory takes seconds, copying one a fraction of that, so each run builds one template and
starts every server from a copy of it."""

from __future__ import annotations

import contextlib
import pathlib
import shutil
from collections.abc import Callable, Iterator
from typing import Any, Protocol, TypeVar

import pytest

__all__ = ["templated_fixtures"]


class _Server(Protocol):
    @property
    def url(self) -> str: ...


ServerT = TypeVar("ServerT", bound=_Server)


def templated_fixtures(
    backend: str,
    build_template: Callable[[], pathlib.Path],
    server_from: Callable[[pathlib.Path], contextlib.AbstractContextManager[ServerT]],
) -> tuple[Any, Any, Any, Any]:
    """``{backend}_template`` (session), ``{backend}_server`` (the session's server),
    ``{backend}_url`` (its URL) and ``restartable_{backend}`` (a test's own server, free to
    stop, pause, kill and restart). Assign all four in the server's module, which conftest
    lists in pytest_plugins."""

    @pytest.fixture(scope="session", name=f"{backend}_template")
    def template() -> Iterator[pathlib.Path]:
        built = build_template()
        try:
            yield built
        finally:
            shutil.rmtree(built, ignore_errors=True)

    @pytest.fixture(scope="session", name=f"{backend}_server")
    def session_server(request: pytest.FixtureRequest) -> Iterator[ServerT]:
        with server_from(request.getfixturevalue(f"{backend}_template")) as server:
            yield server

    @pytest.fixture(scope="session", name=f"{backend}_url")
    def url(request: pytest.FixtureRequest) -> str:
        """The URL of the session's server (shared: tests use unique lock names)."""
        server: _Server = request.getfixturevalue(f"{backend}_server")
        return server.url

    @pytest.fixture(name=f"restartable_{backend}")
    def restartable(request: pytest.FixtureRequest) -> Iterator[ServerT]:
        with server_from(request.getfixturevalue(f"{backend}_template")) as server:
            yield server

    return template, session_server, url, restartable
