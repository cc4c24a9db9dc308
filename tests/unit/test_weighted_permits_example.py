"""The weighted-permits example of docs/api.md runs as written, on the memory store: a
permit of weight 2 out of 8 units, the units in use and each permit's weight read back."""

from __future__ import annotations

import pathlib
import re

import tenure

PAGE = pathlib.Path(__file__).resolve().parents[2] / "docs" / "api.md"


def documented_example() -> str:
    blocks = re.findall(r"```python\n(.*?)```", PAGE.read_text(), re.DOTALL)
    (example,) = [block for block in blocks if "weight=2" in block]
    return example


def test_the_documented_weighted_permit_example_runs() -> None:
    trained: list[tuple[int, int | None]] = []
    with tenure.connect("memory://weighted-example") as locks:
        namespace = {
            "locks": locks,
            "train": lambda devices, fence: trained.append((devices, fence)),
        }
        exec(documented_example(), namespace)  # the page's own code
        assert len(trained) == 1 and trained[0][0] == 2 and trained[0][1] is not None
        info = namespace["info"]
        assert isinstance(info, tenure.LockInfo)
        assert info.units == 0 and info.limit == 8 and info.waiters == ()
        assert namespace["gpus"].weight == 2
