"""The CLI owns stderr: one `tenure: ` line per event. A driver's own log lines (kazoo's
"Connection dropped" against a ZooKeeper that is down) appear only with -v, and prefixed."""

from __future__ import annotations

import pathlib
import subprocess
import sys

import pytest

from tests.servers._process import free_port

pytestmark = pytest.mark.zookeeper

TENURE = pathlib.Path(sys.executable).parent / "tenure"


def tenure_command(*arguments: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(TENURE), *arguments], check=False, env=env, capture_output=True, text=True,
        timeout=120,
    )


@pytest.mark.parametrize("arguments", [["ls"], ["show", "job"], ["run", "job", "--", "true"]])
def test_a_zookeeper_that_is_down_is_one_line(arguments: list[str], env: dict[str, str]) -> None:
    down = f"zookeeper://127.0.0.1:{free_port()}"  # nothing listens there
    result = tenure_command("--url", down, *arguments, env=env)
    assert result.returncode == 69
    lines = result.stderr.splitlines()
    # The one BackendError form (tenure._async.store.failure): the backend's URL first.
    assert len(lines) == 1 and lines[0].startswith(f"tenure: error: {down}: "), result.stderr


def test_with_verbose_the_drivers_lines_are_shown_prefixed(env: dict[str, str]) -> None:
    down = f"zookeeper://127.0.0.1:{free_port()}"
    result = tenure_command("--url", down, "run", "job", "-v", "--", "true", env=env)
    assert result.returncode == 69
    lines = result.stderr.splitlines()
    assert all(line.startswith("tenure: ") for line in lines), result.stderr
    assert any(line.startswith("tenure: kazoo.") for line in lines), result.stderr
    assert lines[-1].startswith(f"tenure: error: {down}: ")
