"""The scheduler recipes (docs/recipes/cron.md, systemd.md, kubernetes.md): each page includes
its file from tests/recipes/, and these tests run the command in that same file, so a page
cannot show a command line that was not tested.

Each command runs twice on each recipe backend (a SQLite file, real servers): once free (the
job runs) and once while this process holds the lock through the API (nothing runs, nothing is
printed, exit 0: what cron would mail, a systemd journal or a Job's log stays empty).
"""

from __future__ import annotations

import configparser
import os
import pathlib
import shlex
import subprocess
import sys
from collections.abc import Callable

import pytest
import yaml

import tenure

HERE = pathlib.Path(__file__).parent
# The five schedule fields of a crontab line come before the command.
CRON_SCHEDULE_FIELDS = 5


def cron_command() -> list[str]:
    line = (HERE / "cron.txt").read_text().strip()
    return shlex.split(line)[CRON_SCHEDULE_FIELDS:]


def systemd_command() -> list[str]:
    # interpolation=None: systemd specifiers such as %i are not Python's.
    service = configparser.ConfigParser(interpolation=None)
    service.optionxform = str  # type: ignore[assignment,method-assign]
    service.read(HERE / "tenure-sync.service")
    assert service["Service"]["Type"] == "oneshot"
    assert service["Service"]["Environment"].startswith("TENURE_URL=")
    timer = configparser.ConfigParser(interpolation=None)
    timer.optionxform = str  # type: ignore[assignment,method-assign]
    timer.read(HERE / "tenure-sync.timer")
    assert timer["Timer"]["OnCalendar"]
    assert timer["Install"]["WantedBy"] == "timers.target"
    return shlex.split(service["Service"]["ExecStart"])


def kubernetes_command() -> list[str]:
    cronjob = yaml.safe_load((HERE / "cronjob.yaml").read_text())
    assert cronjob["apiVersion"] == "batch/v1"
    assert cronjob["kind"] == "CronJob"
    spec = cronjob["spec"]
    assert spec["concurrencyPolicy"] == "Forbid"
    pod = spec["jobTemplate"]["spec"]["template"]["spec"]
    assert pod["restartPolicy"] == "Never"
    (container,) = pod["containers"]
    assert [e["name"] for e in container["env"]] == ["TENURE_URL"]
    command = container["command"]
    assert all(isinstance(part, str) for part in command)
    return list(command)


def run_recipe_command(
    argv: list[str], workdir: pathlib.Path, url: str
) -> subprocess.CompletedProcess[str]:
    assert pathlib.Path(argv[0]).name == "tenure"
    assert argv[1] == "run" and ({"-n", "--no-wait"} & set(argv))
    separator = argv.index("--")
    # The venv's own console script stands in for the installed one, and a script in the
    # work directory for the job (absolute job paths are taken relative to it).
    job = workdir / pathlib.Path(argv[separator + 1]).name
    tenure_script = str(pathlib.Path(sys.executable).parent / "tenure")
    argv = [tenure_script, *argv[1 : separator + 1], str(job)]
    environment = {**os.environ, "TENURE_URL": url}
    return subprocess.run(
        argv, check=False, cwd=workdir, env=environment, capture_output=True, text=True,
        timeout=60,
    )


@pytest.mark.parametrize(
    "command",
    [cron_command, systemd_command, kubernetes_command],
    ids=["cron", "systemd", "kubernetes"],
)
def test_recipe_runs_the_job_when_free_and_skips_it_silently_when_busy(
    command: Callable[[], list[str]], tmp_path: pathlib.Path, recipe_url: str
) -> None:
    argv = command()
    name = argv[2]
    url = recipe_url
    marker = tmp_path / "runs.log"
    job = tmp_path / pathlib.Path(argv[argv.index("--") + 1]).name
    job.write_text(f"#!/bin/sh\necho ran >> {shlex.quote(str(marker))}\n")
    job.chmod(0o755)

    free = run_recipe_command(argv, tmp_path, url)
    assert free.returncode == 0, free.stderr
    assert marker.read_text().splitlines() == ["ran"]

    client = tenure.connect(url)
    try:
        with client.lock(name, ttl=30):
            busy = run_recipe_command(argv, tmp_path, url)
    finally:
        client.close()
    assert busy.returncode == 0, busy.stderr
    assert (busy.stdout, busy.stderr) == ("", "")
    assert marker.read_text().splitlines() == ["ran"]
