"""The two flavours of the I/O edge export the same names: the generated code calls on
``sync_io`` every name the hand-written code calls on ``async_io``."""

from __future__ import annotations

import pytest

from tenure._concurrency import async_io, edge, sync_io


@pytest.mark.parametrize("flavour", [async_io, sync_io], ids=["asyncio", "threads"])
def test_each_flavour_defines_every_name_of_the_edge(flavour: object) -> None:
    missing = [name for name in edge.NAMES if not hasattr(flavour, name)]
    assert not missing
    assert sorted(flavour.__all__) == sorted(edge.NAMES)  # type: ignore[attr-defined]


def test_what_both_flavours_share_is_one_object() -> None:
    assert async_io.DeadlineExceeded is sync_io.DeadlineExceeded is edge.DeadlineExceeded
