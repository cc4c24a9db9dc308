"""Session servers shared by every pytest-xdist worker of a run, started once.

A 3-node etcd cluster and a 3-node ZooKeeper ensemble cost more idle CPU than any other
session server (Raft heartbeats every 50 ms, JVMs ticking: about 4% and 1.2% of a core, read
off this machine), so one per worker (six on two cores) burned a fifth of a core for the
whole run to serve nobody. Tests on the session servers use names no other test uses (the
``name`` fixture), so one server serves every worker.

How: the controller picks a directory for the run (``pytest_configure``, inherited by the
workers through the environment). The first worker that needs a server takes that server's
flock, starts it in a directory below, and pickles its description (ports, PIDs, paths);
the others read the description. A worker never stops a shared server: the controller stops
each one by PID once every worker is done (``pytest_unconfigure``), and removes the
directory. A run without workers starts and stops its servers itself, as before.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import pathlib
import pickle
import shutil
import tempfile
import warnings
from collections.abc import Callable, Iterator
from typing import Protocol, TypeVar

import pytest

__all__ = ["shared_server"]

_DIRECTORY = "TENURE_SHARED_SERVERS"


class _Stoppable(Protocol):
    def stop(self) -> None: ...


ServerT = TypeVar("ServerT", bound=_Stoppable)


def pytest_configure(config: pytest.Config) -> None:
    # The controller of a run with workers (a worker has ``workerinput``; a run without
    # workers has no ``numprocesses``), before it starts the workers.
    if hasattr(config, "workerinput") or not getattr(config.option, "numprocesses", None):
        return
    os.environ[_DIRECTORY] = tempfile.mkdtemp(prefix="tenure-shared-")


def pytest_unconfigure(config: pytest.Config) -> None:
    if hasattr(config, "workerinput"):
        return
    directory = os.environ.pop(_DIRECTORY, None)
    if directory is None:
        return
    try:
        for description in sorted(pathlib.Path(directory).glob("*.pickle")):
            server: _Stoppable = pickle.loads(description.read_bytes())
            server.stop()
    finally:
        shutil.rmtree(directory, ignore_errors=True)


@contextlib.contextmanager
def shared_server(key: str, start: Callable[[pathlib.Path], ServerT]) -> Iterator[ServerT]:
    """The run's server named ``key``: ``start(workdir)`` by the first worker that asks, the
    same server (unpickled) for every other; started and stopped here without workers."""
    directory = os.environ.get(_DIRECTORY)
    if directory is None:
        workdir = pathlib.Path(tempfile.mkdtemp(prefix=f"tenure-{key}-"))
        try:
            server = start(workdir)
            try:
                yield server
            finally:
                server.stop()
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
        return
    root = pathlib.Path(directory)
    description = root / f"{key}.pickle"
    with (root / f"{key}.lock").open("w") as claim:
        fcntl.flock(claim, fcntl.LOCK_EX)
        if description.exists():
            server = pickle.loads(description.read_bytes())
        else:
            workdir = root / key
            workdir.mkdir()
            started = start(workdir)
            # Written whole, then renamed: a reader never meets half a description.
            partial = root / f"{key}.partial"
            partial.write_bytes(pickle.dumps(started))
            partial.rename(description)
            # This worker uses the description too, and lets go of its child processes
            # here: the servers outlive it (the controller stops them), which Popen's
            # finaliser would report as a ResourceWarning at some later test.
            server = pickle.loads(description.read_bytes())
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ResourceWarning)
                del started
    yield server
