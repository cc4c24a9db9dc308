"""Backends that need no server: memory and the embedded SQLite file."""

from __future__ import annotations

import pathlib

import pytest


@pytest.fixture
def memory_url() -> str:
    return "memory://"


@pytest.fixture
def sqlite_url(tmp_path: pathlib.Path) -> str:
    return f"sqlite:///{tmp_path / 'locks.db'}"
