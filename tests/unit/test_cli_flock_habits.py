"""flock(1)'s short options, -q/-v, the wait report (with a fake clock, so nothing sleeps),
help layout, and the completion scripts of `tenure completion`."""

from __future__ import annotations

import io
import pathlib
import shutil
import subprocess
import sys

import pytest

import tenure
from tenure._types import Holder, LockInfo
from tenure.cli import EXIT_BUSY
from tenure.cli.main import _parse, main
from tenure.cli.progress import ERASE, QUIET, VERBOSE, WaitReport

TENURE = pathlib.Path(sys.executable).parent / "tenure"


@pytest.mark.parametrize(
    ("arguments", "field", "value"),
    [
        (["-n"], "no_wait", True),
        (["--no-wait"], "no_wait", True),
        (["--nonblock"], "no_wait", True),
        (["--nb"], "no_wait", True),
        (["--wait", "2"], "timeout", 2.0),
        (["-w", "5"], "timeout", 5.0),
        (["-w", "0.5"], "timeout", 0.5),
        (["-E", "0"], "busy_exit_code", 0),
        (["--conflict-exit-code", "3"], "busy_exit_code", 3),
        (["--busy-exit-code", "4"], "busy_exit_code", 4),
        (["-q"], "verbosity", QUIET),
        (["--quiet"], "verbosity", QUIET),
        (["-v"], "verbosity", VERBOSE),
        (["--verbose"], "verbosity", VERBOSE),
        ([], "verbosity", 0),
        ([], "busy_exit_code", EXIT_BUSY),
    ],
)
def test_flock_and_verbosity_flags(arguments: list[str], field: str, value: object) -> None:
    options = _parse(["run", "job", *arguments, "--", "true"])
    assert getattr(options, field) == value
    assert options.argv == ["true"]


def test_flags_combine_as_in_the_cron_recipe() -> None:
    options = _parse(["run", "sync", "-n", "-q", "-E", "0", "--", "./sync.sh", "-n"])
    assert (options.no_wait, options.verbosity, options.busy_exit_code) == (True, QUIET, 0)
    assert options.argv == ["./sync.sh", "-n"]  # CMD's own -n is CMD's


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        (["-q", "-v"], "not allowed with"),
        (["-n", "-w", "1"], "not allowed with"),
        (["-E", "256"], "0..255"),
        (["-w", "-1"], "timeout must be >= 0"),
    ],
)
def test_conflicting_or_bad_flags_are_one_line_and_exit_2(
    arguments: list[str], expected: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["run", "job", *arguments, "--", "true"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and expected in err


def test_run_help_has_examples_and_one_line_per_option(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    text = capsys.readouterr().out
    assert "tenure run sync -n -q -E 0 -- ./sync.sh" in text
    assert "--semaphore 3" in text
    for flag in ("-n, --no-wait", "-w S, --timeout S", "-q, --quiet", "-v, --verbose",
                 "--conflict-exit-code"):
        assert flag in text
    description = text.split("positional arguments:")[0]
    assert all(len(line) <= 80 for line in description.splitlines())


class _Stream(io.StringIO):
    def __init__(self, tty: bool) -> None:
        super().__init__()
        self._tty = tty

    def isatty(self) -> bool:
        return self._tty


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


HELD = LockInfo(name="job", fence=12, holder=Holder(host="h1", pid=42, thread="t"),
                acquired_at=None, ttl_left=20.0)


def _report(verbosity: int, tty: bool, timeout: float | None = 5.0
            ) -> tuple[WaitReport, _Stream, _Clock, list[int]]:
    stream, clock, looks = _Stream(tty), _Clock(), []

    def look() -> LockInfo:
        looks.append(1)
        return HELD

    report = WaitReport("job", verbosity=verbosity, timeout=timeout, look=look, err=stream,
                        clock=clock)
    return report, stream, clock, looks


def test_quiet_says_nothing() -> None:
    report, stream, clock, looks = _report(QUIET, tty=True)
    report.started()
    clock.now += 10
    report.tick()
    report.acquired(13)
    assert stream.getvalue() == "" and not looks


def test_default_says_one_line_only_after_a_second() -> None:
    report, stream, clock, _ = _report(0, tty=False, timeout=10.0)
    report.started()
    clock.now += 0.5
    report.tick()
    assert stream.getvalue() == ""
    clock.now += 0.7
    report.tick()
    clock.now += 3
    report.tick()
    report.acquired(13)
    assert stream.getvalue() == "tenure: waiting for 'job' held by h1:42, fence 12, 8.8 s left\n"


def test_verbose_on_a_terminal_redraws_one_line_and_erases_it() -> None:
    report, stream, clock, looks = _report(VERBOSE, tty=True, timeout=5.0)
    report.started()
    for _ in range(4):  # a second of ticks: one look at the backend, four redraws
        clock.now += 0.25
        report.tick()
    report.acquired(13)
    text = stream.getvalue()
    assert text.startswith(f"{ERASE}tenure: waiting for 'job' held by h1:42, fence 12, 5.0 s left")
    assert f"{ERASE}tenure: waiting for 'job' held by h1:42, fence 12, 4.0 s left" in text
    assert text.endswith(ERASE) and "\n" not in text
    assert len(looks) == 2  # at start and once LOOK_EVERY later, not on every redraw


def test_verbose_off_a_terminal_says_start_and_end() -> None:
    report, stream, clock, _ = _report(VERBOSE, tty=False, timeout=None)
    report.started()
    clock.now += 2.25
    report.tick()
    report.acquired(13)
    assert stream.getvalue() == (
        "tenure: waiting for 'job' held by h1:42, fence 12\n"
        "tenure: acquired 'job' after waiting 2.2 s (fence 13)\n"
    )


# ---- completion ---------------------------------------------------------------------------


def _script(shell: str, capsys: pytest.CaptureFixture[str]) -> str:
    assert main(["completion", shell]) == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_completion_scripts_are_valid_shell(
    shell: str, tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    if shutil.which(shell) is None:
        pytest.skip(f"{shell} is not installed")
    path = tmp_path / f"tenure.{shell}"
    path.write_text(_script(shell, capsys))
    result = subprocess.run([shell, "-n", str(path)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr


def test_completion_refuses_an_unknown_shell(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["completion", "tcsh"]) == 2
    assert "invalid choice" in capsys.readouterr().err


def _complete(script: pathlib.Path, *words: str) -> list[str]:
    """COMPREPLY for the command line ``words`` (the last one is being typed)."""
    # As bash sets them: the script reads the line itself (its words hold colons).
    driver = (
        f"source '{script}'\n"
        'COMP_LINE="$1"; COMP_POINT=${#COMP_LINE}; _tenure\n'
        'printf "%s\\n" "${COMPREPLY[@]}"\n'
    )
    result = subprocess.run(["bash", "-c", driver, "bash", " ".join(words)],
                            capture_output=True, text=True, check=True)
    return result.stdout.split()


def test_bash_completes_subcommands_flags_and_shells(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = tmp_path / "tenure.bash"
    script.write_text(_script("bash", capsys))
    commands = {"run", "ls", "show", "break", "demo", "completion"}
    assert commands <= set(_complete(script, "tenure", ""))
    assert _complete(script, "tenure", "sh") == ["show"]
    assert _complete(script, "tenure", "--url", "u", "r") == ["run"]
    assert _complete(script, "tenure", "run", "job", "--no-") == ["--no-wait"]
    assert "--conflict-exit-code" in _complete(script, "tenure", "run", "job", "-")
    assert _complete(script, "tenure", "run", "job", "-w", "") == []  # a number goes there
    assert _complete(script, "tenure", "completion", "") == ["bash", "zsh", "fish"]


def test_bash_completes_lock_names_from_tenure_ls(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = tmp_path / "tenure.bash"
    script.write_text(_script("bash", capsys))
    url = f"sqlite:///{tmp_path / 'locks.db'}"
    with tenure.connect(url) as locks, locks.lock("nightly", 30), locks.lock("deploy", 30):
        driver = (
            f"export PATH='{TENURE.parent}':$PATH TENURE_URL='{url}'\n"
            f"source '{script}'\n"
            'COMP_LINE="tenure show n"; COMP_POINT=${#COMP_LINE}; _tenure\n'
            'printf "%s\\n" "${COMPREPLY[@]}"\n'
        )
        result = subprocess.run(["bash", "-c", driver], capture_output=True, text=True,
                                check=True)
    assert result.stdout.split() == ["nightly"]


def test_fish_completes_subcommands_and_flags(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    if shutil.which("fish") is None:
        pytest.skip("fish is not installed")
    script = tmp_path / "tenure.fish"
    script.write_text(_script("fish", capsys))

    def complete(line: str) -> list[str]:
        result = subprocess.run(
            ["fish", "--no-config", "-c", f"source '{script}'; complete -C '{line}'"],
            capture_output=True, text=True, check=True,
        )
        return [row.split("\t")[0] for row in result.stdout.splitlines()]

    assert complete("tenure sh") == ["show"]
    assert complete("tenure run job --no-") == ["--no-wait"]
    assert complete("tenure completion ") == ["bash", "fish", "zsh"]
