"""Where the recipes' locks live: the embedded SQLite default and real servers.

A recipe is shown with one backend, but its code is backend-agnostic (`$TENURE_URL`), so each
recipe test runs on the SQLite file a single machine would use and on the servers a fleet
would share (redis-server, PostgreSQL), started on free loopback ports by their fixtures.
Lock names are the recipes' own: a server is shared by the session, and every test releases
what it takes.
"""

from __future__ import annotations

import pytest

from tests.backends import row

RECIPE_BACKENDS = ["sqlite", "redis", "postgresql"]


@pytest.fixture(
    params=[row(name).param() for name in RECIPE_BACKENDS]
)
def recipe_url(request: pytest.FixtureRequest) -> str:
    """The URL of the lock store a recipe runs on (``TENURE_URL``)."""
    url: str = request.getfixturevalue(row(request.param).fixture)
    return url
