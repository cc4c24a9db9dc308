"""Every conformance test runs once per backend of the table in tests/backends.py.

A backend's tests join by adding one row there (its name, a scheme, the fixture giving its
URL and that fixture's module): its marker, its server plugin and its conformance
parameters are read from it here. A server that cannot start fails the run; nothing here
skips.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import pathlib
import signal
import uuid

import pytest
from hypothesis import settings

from tests import backends

# Speed is measured in bench/, never asserted in tests: a property test must not fail because
# a loaded machine ran one example past hypothesis's default 200 ms deadline.
settings.register_profile("tenure", deadline=None)
settings.load_profile("tenure")

pytest_plugins = ["tests.cpu_report", "tests.servers._shared", *backends.server_modules()]


def offers(backend: str, primitive: str) -> bool:
    """Whether the backend behind a marker implements ``primitive`` (a module's PRIMITIVE),
    as its store declares (``AsyncStore.offers``)."""
    from tenure._async.connect import store_class
    from tenure._urls import load_backend_module

    module = load_backend_module(f"{backends.row(backend).scheme}://", "_async")
    return primitive in store_class(module.BACKEND).offers


def pytest_configure(config: pytest.Config) -> None:
    # A shell without job control starts a background command (``.ci/run &``) with SIGINT
    # ignored, every process it starts inherits that, and Python then installs no Ctrl-C
    # handler. The tests that stop a CLI with SIGINT, as a user's Ctrl-C would, need it
    # delivered: restore the default here, and every child (exec resets a handled signal to
    # its default action) gets Python's own again.
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    # Each backend's marker, from the table (--strict-markers refuses any other).
    for backend in backends.BACKENDS:
        config.addinivalue_line("markers", backend.marker)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--backends",
        default="all",
        help="comma-separated backends for the conformance suite (default: all of them: "
        f"{','.join(backends.NAMES)})",
    )


def selected_backends(config: pytest.Config) -> list[str]:
    try:
        return backends.choose(config.getoption("--backends"))
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from None


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "backend_url" in metafunc.fixturenames:
        # A module about one primitive (PRIMITIVE = "semaphore") runs on every backend that
        # implements it; test_capabilities checks that the others refuse it with a reason.
        # A test may also name the backends it applies to (``test.backends``).
        primitive = getattr(metafunc.module, "PRIMITIVE", None)
        wanted = getattr(metafunc.function, "backends", None)
        params = [
            backends.row(name).param()
            for name in selected_backends(metafunc.config)
            if (primitive is None or offers(name, primitive))
            and (wanted is None or name in wanted)
        ]
        metafunc.parametrize("backend_url", params, indirect=True)


@pytest.fixture
def backend_url(request: pytest.FixtureRequest) -> str:
    url: str = request.getfixturevalue(backends.row(request.param).fixture)
    return url


@pytest.fixture
def backend_name(request: pytest.FixtureRequest) -> str:
    name: str = request.node.callspec.params["backend_url"]
    return name


@pytest.fixture
def name() -> str:
    """A lock name no other test uses, so tests can share one server without clean-up."""
    return f"test:{uuid.uuid4().hex}"


@pytest.fixture
def env(tmp_path: pathlib.Path) -> dict[str, str]:
    """The environment of a ``tenure`` command a test runs: this process's, less a URL or
    debug switch of the caller's, with the per-user state (the default SQLite store) in the
    test's temp dir."""
    environment = {k: v for k, v in os.environ.items() if k not in ("TENURE_URL", "TENURE_DEBUG")}
    environment["XDG_STATE_HOME"] = str(tmp_path / "state")
    return environment


@pytest.fixture
def state_dir(tmp_path: pathlib.Path) -> pathlib.Path:
    return tmp_path


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    """Run ``async def`` tests in a fresh event loop; no plugin needed."""
    if inspect.iscoroutinefunction(pyfuncitem.obj):
        arguments = {
            argument: pyfuncitem.funcargs[argument]
            for argument in pyfuncitem._fixtureinfo.argnames
        }
        asyncio.run(pyfuncitem.obj(**arguments))
        return True
    return None
