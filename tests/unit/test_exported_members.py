"""``tenure.__all__`` is the public API: complete, and nothing in it missing."""

from __future__ import annotations

import pytest

import tenure


def test_all_is_complete() -> None:
    public = {name for name in dir(tenure) if not name.startswith("_")}
    # Submodules are not API.
    public -= {"backends", "cli", "verify"}
    assert public == set(tenure.__all__) - {"__version__"}


def test_all_names_exist() -> None:
    for name in tenure.__all__:
        assert hasattr(tenure, name), name


def test_one_exception_root() -> None:
    errors = [getattr(tenure, n) for n in tenure.__all__ if n.endswith(("Error", "Timeout", "Lost",
              "Owned", "Argument", "ArgumentType", "Fence"))]
    for error in errors:
        if isinstance(error, type) and issubclass(error, BaseException):
            assert issubclass(error, tenure.TenureError), error
    assert issubclass(tenure.InvalidArgument, ValueError)
    assert issubclass(tenure.InvalidArgumentType, TypeError)


def test_lock_timeout_is_a_timeout_error() -> None:
    # ``except TimeoutError`` (the habit filelock's Timeout and asyncio.timeout teach) must
    # catch it, as must ``except tenure.TenureError``.
    assert issubclass(tenure.LockTimeout, TimeoutError)
    assert issubclass(tenure.LockTimeout, tenure.LockError)
    locks = tenure.connect("memory://")
    with locks.lock("typing:timeout", ttl=30):
        try:
            with locks.lock("typing:timeout", ttl=30, timeout=0):
                raise AssertionError("acquired a held lock")
        except TimeoutError as exc:
            assert isinstance(exc, tenure.LockTimeout)
            assert exc.name == "typing:timeout"


def test_a_candidate_has_a_term_once_elected() -> None:
    # Leadership.term is typed int (tests/typing checks that with mypy): a candidate that has
    # not won says so instead of answering None.
    locks = tenure.connect("memory://")
    candidate = locks.election("typing:term", ttl=30).candidate(value="a")
    with pytest.raises(tenure.NotOwned, match="not been elected"):
        _ = candidate.term
    assert candidate.acquire(timeout=0)
    assert isinstance(candidate.term, int) and candidate.term >= 1
    candidate.resign()
    assert candidate.term >= 1  # kept after resign
