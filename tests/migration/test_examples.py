"""Runs the code of docs/coming-from.md (tests/migration/examples.py) on the store each
section names: Redis for redis-py, python-redis-lock and tooz, Redlock for pottery, the
SQLite file for filelock, ZooKeeper for kazoo."""

from __future__ import annotations

import pathlib
import uuid

import pytest

from tests.migration import examples


def apart(url: str) -> str:
    """``url`` with a namespace of this test's own: the examples use plain names."""
    return f"{url}{'&' if '?' in url else '?'}namespace=migration-{uuid.uuid4().hex}"


@pytest.mark.redis
def test_redis_py(redis_url: str) -> None:
    first, second = examples.redis_py(apart(redis_url))
    assert first is not None and second is not None and first < second


@pytest.mark.redis
def test_redis_py_renewal(redis_url: str) -> None:
    assert examples.redis_py_renewal(apart(redis_url)) is False  # released on exit


@pytest.mark.redis
def test_python_redis_lock(redis_url: str) -> None:
    assert examples.python_redis_lock(apart(redis_url)) is not None


@pytest.mark.redlock
def test_pottery(redlock_url: str) -> None:
    fence, printed = examples.pottery(apart(redlock_url))
    assert fence is not None and fence > 0 and printed == "printed"


@pytest.mark.sqlite
def test_filelock(tmp_path: pathlib.Path) -> None:
    assert examples.filelock(f"sqlite:///{tmp_path / 'locks.db'}") is True


@pytest.mark.zookeeper
def test_kazoo(zookeeper_url: str) -> None:
    fence, term = examples.kazoo(apart(zookeeper_url))
    assert fence is not None and term is not None and fence > 0 and term > 0


@pytest.mark.redis
def test_tooz(redis_url: str) -> None:
    assert examples.tooz(apart(redis_url)) is True
