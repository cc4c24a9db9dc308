"""The weighted-permits example of docs/api.md runs as written, on the memory store: a
permit of weight 2 out of 8 units, the units in use and each permit's weight read back. In
a subprocess: its renewing permit starts the process's renewal thread, whose jitter draws
from the global random state that this worker's hypothesis tests watch."""

from __future__ import annotations

import pathlib
import re
import subprocess
import sys
import textwrap

ROOT = pathlib.Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "api.md"


def documented_example() -> str:
    blocks = re.findall(r"```python\n(.*?)```", PAGE.read_text(), re.DOTALL)
    (example,) = [block for block in blocks if "weight=2" in block]
    return example


def test_the_documented_weighted_permit_example_runs() -> None:
    script = textwrap.dedent("""
        import tenure

        trained = []

        def train(devices, fence):
            trained.append((devices, fence))

        locks = tenure.connect("memory://")
    """) + documented_example() + textwrap.dedent("""
        assert len(trained) == 1 and trained[0][0] == 2 and trained[0][1] is not None
        assert isinstance(info, tenure.LockInfo)
        assert info.units == 0 and info.limit == 8 and info.waiters == ()
        assert gpus.weight == 2
        locks.close()
        print("ok")
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=60, check=False, cwd=ROOT)
    assert done.returncode == 0 and done.stdout == "ok\n", done.stderr
