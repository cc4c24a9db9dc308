"""The MongoDB stand-in: ``mongoeco``'s wire-protocol server, in its own Python 3.13 venv.

No real ``mongod`` can be installed on the test machines. ``scripts/install-mongoeco`` puts
mongoeco (with its ``wire`` extra) into ``.venv-mongoeco``; mongoeco ships no command-line
server, so ``LAUNCHER`` below runs its ``AsyncMongoEcoProxyServer`` on a chosen port until
SIGTERM. Readiness is a real ``ping`` through PyMongo. The storage engine is mongoeco's
in-memory one unless ``TENURE_MONGOECO_ENGINE=sqlite`` (a file in the server's temp dir,
which survives a restart).
"""

from __future__ import annotations

import os
import pathlib
import uuid
from collections.abc import Iterator

import pymongo
import pytest

from tests.servers._process import ManagedServer, ServerFailed, free_port

ROOT = pathlib.Path(__file__).resolve().parents[2]
VENV_PYTHON = ROOT / ".venv-mongoeco" / "bin" / "python"

LAUNCHER = """
import asyncio, signal, sys

from mongoeco.wire import AsyncMongoEcoProxyServer


async def serve(port, engine_name, path):
    engine = None
    if engine_name == "sqlite":
        from mongoeco.engines.sqlite import SQLiteEngine
        engine = SQLiteEngine(path)
    server = AsyncMongoEcoProxyServer(engine=engine, host="127.0.0.1", port=port)
    address = await server.start()
    print(f"mongoeco listening on {address.uri}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for number in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(number, stop.set)
    await stop.wait()
    await server.close()


asyncio.run(serve(int(sys.argv[1]), sys.argv[2], sys.argv[3]))
"""


def mongoeco_python() -> str:
    if not os.access(VENV_PYTHON, os.X_OK):
        raise ServerFailed(
            f"{VENV_PYTHON} not found: run scripts/install-mongoeco (scripts/install-servers "
            "does) to install the MongoDB stand-in"
        )
    return str(VENV_PYTHON)


def ping(port: int) -> None:
    """Raise unless a MongoDB server answers ``ping`` on ``port``."""
    client: pymongo.MongoClient[dict[str, object]] = pymongo.MongoClient(
        "127.0.0.1", port, directConnection=True, serverSelectionTimeoutMS=500,
        connectTimeoutMS=500, appname="tenure-probe",
    )
    try:
        client.admin.command("ping")
    finally:
        client.close()


class MongoecoServer(ManagedServer):
    """A mongoeco server in ``workdir`` on ``port`` (a free one by default): ``.start()``,
    ``.stop()``, ``.kill()``, ``.pause()`` like any ManagedServer; ``url`` reaches it.
    ``engine``: ``memory`` (fast; a restart forgets everything) or ``sqlite`` (a file in
    ``workdir``, kept across restarts); default ``$TENURE_MONGOECO_ENGINE``, else memory."""

    def __init__(
        self, workdir: pathlib.Path, port: int | None = None, engine: str | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        self.port = port or free_port()
        engine = engine or os.environ.get("TENURE_MONGOECO_ENGINE", "memory")
        if engine not in ("memory", "sqlite"):
            raise ServerFailed(f"TENURE_MONGOECO_ENGINE must be memory or sqlite, not {engine!r}")
        workdir.mkdir(parents=True, exist_ok=True)
        argv = [mongoeco_python(), "-c", LAUNCHER, str(self.port), engine,
                str(workdir / "mongoeco.db")]
        super().__init__("mongoeco", argv, workdir, lambda: ping(self.port), env=env,
                         start_timeout=60.0)

    @property
    def url(self) -> str:
        return f"mongodb://127.0.0.1:{self.port}/?directConnection=true"


@pytest.fixture(scope="session")
def mongodb_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MongoecoServer]:
    server = MongoecoServer(tmp_path_factory.mktemp("mongoeco"))
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def mongodb_url(mongodb_server: MongoecoServer) -> str:
    return mongodb_server.url


@pytest.fixture
def mongodb_collection_url(mongodb_url: str) -> str:
    """The session's server, with a collection of this test's own: the backend table's
    fixture (conformance, safety, the process tests). mongoeco's in-memory engine spends
    time on each write in proportion to the documents of its collection (an upsert by
    ``_id``: 2.3 ms among 100 documents, 13-21 ms among 3,000, measured here), and each
    test leaves its fresh names behind: a collection of its own keeps one test's cost from
    depending on the tests before it on the worker. (In a full run mongoeco's CPU stayed
    about the same, 214 against 215 CPU-s: a worker's session leaves fewer documents than
    that.) A real ``mongod`` finds a document by its ``_id`` index whatever the collection
    holds."""
    return f"{mongodb_url}&collection=t{uuid.uuid4().hex[:16]}"
