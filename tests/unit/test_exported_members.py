"""``tenure.__all__`` is the public API: complete, and nothing in it missing."""

from __future__ import annotations

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
