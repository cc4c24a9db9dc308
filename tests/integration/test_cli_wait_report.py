"""`tenure run`'s flock-style options and wait reports against a real SQLite file, tenure a
real process: -n/-q/-E, a -w 0.5 timeout, and the live -v line on a pseudo-terminal."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
from collections.abc import Iterator

import pytest

import tenure
from tenure.cli import EXIT_BUSY
from tenure.cli.progress import ERASE

pytestmark = pytest.mark.sqlite

TENURE = pathlib.Path(sys.executable).parent / "tenure"


@pytest.fixture
def env(tmp_path: pathlib.Path) -> dict[str, str]:
    environment = {k: v for k, v in os.environ.items() if k != "TENURE_DEBUG"}
    environment["TENURE_URL"] = f"sqlite:///{tmp_path / 'locks.db'}"
    return environment


@pytest.fixture
def held(env: dict[str, str]) -> Iterator[int]:
    """'job' held by this test process for the whole test; yields its fence."""
    with tenure.connect(env["TENURE_URL"]) as locks:
        lock = locks.lock("job", 60)
        lock.acquire()
        yield lock.fence
        lock.release()


def tenure_run(*arguments: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(TENURE), "run", "job", *arguments], check=False, env=env, capture_output=True,
        text=True, timeout=60,
    )


def test_no_wait_quiet_is_silent_with_the_busy_status(held: int, env: dict[str, str]) -> None:
    result = tenure_run("-n", "-q", "--", "echo", "ran", env=env)
    assert (result.returncode, result.stdout, result.stderr) == (EXIT_BUSY, "", "")


def test_the_cron_recipe_skips_silently_with_status_0(held: int, env: dict[str, str]) -> None:
    result = tenure_run("-n", "-q", "-E", "0", "--", "echo", "ran", env=env)
    assert (result.returncode, result.stdout, result.stderr) == (0, "", "")


def test_no_wait_says_who_holds_it_by_default(held: int, env: dict[str, str]) -> None:
    result = tenure_run("-n", "-E", "9", "--", "echo", "ran", env=env)
    assert result.returncode == 9 and result.stdout == ""
    assert f"'job' is held (held by {os.uname().nodename}:{os.getpid()}, fence {held}" \
        in result.stderr


def test_a_half_second_timeout_gives_up(held: int, env: dict[str, str]) -> None:
    result = tenure_run("-w", "0.5", "--", "echo", "ran", env=env)
    assert result.returncode == EXIT_BUSY and result.stdout == ""
    assert "'job' was not acquired within 0.5 s" in result.stderr


def test_verbose_off_a_terminal_says_when_waiting_starts(held: int, env: dict[str, str]) -> None:
    result = tenure_run("-v", "-w", "0.5", "--", "echo", "ran", env=env)
    assert result.returncode == EXIT_BUSY
    first, last = result.stderr.splitlines()
    assert first.startswith(f"tenure: waiting for 'job' held by {os.uname().nodename}:")
    assert f"fence {held}, " in first and first.endswith(" s left")
    assert "not acquired within 0.5 s" in last


def test_verbose_says_when_acquired(env: dict[str, str]) -> None:
    result = tenure_run("-v", "--", "echo", "ran", env=env)
    # Free at once: no wait, so nothing to report.
    assert (result.returncode, result.stdout, result.stderr) == (0, "ran\n", "")


def test_quiet_still_prints_errors(env: dict[str, str]) -> None:
    result = tenure_run("-q", "--", "/nonexistent/cmd", env=env)
    assert result.returncode == 127 and "command not found" in result.stderr


def test_verbose_on_a_terminal_draws_a_live_line(held: int, env: dict[str, str]) -> None:
    controller, terminal = os.openpty()
    try:
        process = subprocess.Popen(
            [str(TENURE), "run", "job", "-v", "-w", "1.5", "--", "echo", "ran"],
            env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=terminal,
        )
        os.close(terminal)
        output = b""
        while True:
            try:
                chunk = os.read(controller, 4096)
            except OSError:  # EIO: the last writer closed the terminal
                break
            if not chunk:
                break
            output += chunk
        assert process.wait(timeout=60) == EXIT_BUSY
        assert process.stdout is not None and process.stdout.read() == b""
        process.stdout.close()
    finally:
        os.close(controller)
    text = output.decode()
    line = f"{ERASE}tenure: waiting for 'job' held by {os.uname().nodename}:{os.getpid()}, " \
        f"fence {held}, "
    assert text.count(line) >= 2  # redrawn in place, not one line per refresh
    assert "s left" in text
    # The live line is erased before the verdict, which is a line of its own.
    assert text.rstrip().rsplit(ERASE, 1)[1].startswith("tenure: 'job' was not acquired within")
    assert text.rstrip().endswith("; not running 'echo'")
