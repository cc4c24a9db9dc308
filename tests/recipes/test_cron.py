"""The cron recipe (docs/recipes/cron.md): its crontab line, run as cron would run it.

The page includes tests/recipes/cron.txt, and this test runs the command of that same line,
so the page cannot show a line that was not tested.
"""

from __future__ import annotations

import os
import pathlib
import shlex
import subprocess
import sys

import tenure

CRON_LINE = (pathlib.Path(__file__).parent / "cron.txt").read_text().strip()
# The five schedule fields of a crontab line come before the command.
SCHEDULE_FIELDS = 5


def run_cron_command(workdir: pathlib.Path, url: str) -> subprocess.CompletedProcess[str]:
    argv = shlex.split(CRON_LINE)[SCHEDULE_FIELDS:]
    assert argv[0] == "tenure"
    # The venv's own console script, as cron would find it on PATH.
    argv[0] = str(pathlib.Path(sys.executable).parent / "tenure")
    environment = {**os.environ, "TENURE_URL": url}
    return subprocess.run(
        argv, cwd=workdir, env=environment, capture_output=True, text=True, timeout=60
    )


def test_cron_line_runs_the_job_when_free_and_skips_it_quietly_when_busy(
    tmp_path: pathlib.Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'locks.db'}"
    marker = tmp_path / "runs.log"
    script = tmp_path / "sync.sh"
    script.write_text(f"#!/bin/sh\necho ran >> {shlex.quote(str(marker))}\n")
    script.chmod(0o755)

    free = run_cron_command(tmp_path, url)
    assert free.returncode == 0, free.stderr
    assert marker.read_text().splitlines() == ["ran"]

    # Another holder (here this process, through the API) has the lock: the line runs
    # nothing, says who holds it on stderr, and exits 0 so cron reports no failure.
    client = tenure.connect(url)
    try:
        with client.lock("sync", ttl=30):
            busy = run_cron_command(tmp_path, url)
    finally:
        client.close()
    assert busy.returncode == 0, busy.stderr
    assert busy.stderr.strip() != ""
    assert marker.read_text().splitlines() == ["ran"]
