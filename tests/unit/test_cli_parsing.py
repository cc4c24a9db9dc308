"""The `tenure` command's parsing, error reporting and exit statuses, without a shared server:
in-process where nothing blocks signals, else the real console script in a subprocess."""

from __future__ import annotations

import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys

import pytest

import tenure
from tenure.cli import EXIT_BUSY, EXIT_LOST, EXIT_USAGE
from tenure.cli.main import COMMANDS, _parse, build_parser, main
from tenure.cli.parsers import MANUAL_URL
from tenure.cli.run import should_forward
from tenure.cli.signals import SI_KERNEL, Arrival

TENURE = pathlib.Path(sys.executable).parent / "tenure"


def tenure_command(
    *arguments: str, env: dict[str, str], module: bool = False
) -> subprocess.CompletedProcess[str]:
    launcher = [sys.executable, "-m", "tenure"] if module else [str(TENURE)]
    return subprocess.run(
        [*launcher, *arguments], check=False, env=env, capture_output=True, text=True, timeout=60
    )


@pytest.fixture
def env(tmp_path: pathlib.Path) -> dict[str, str]:
    """No $TENURE_URL, and a per-user default inside tmp_path: nothing touches ~/.local."""
    environment = {k: v for k, v in os.environ.items() if k not in ("TENURE_URL", "TENURE_DEBUG")}
    environment["XDG_STATE_HOME"] = str(tmp_path / "state")
    return environment


def test_console_script_is_installed() -> None:
    assert TENURE.is_file(), "pip install -e . should have created the tenure console script"


def test_help_documents_commands_and_exit_statuses(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    assert exit_info.value.code == 0
    text = capsys.readouterr().out
    for word in ("run", "ls", "show", "break", "demo", str(EXIT_BUSY), str(EXIT_LOST)):
        assert word in text
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    run_help = capsys.readouterr().out
    assert "--busy-exit-code" in run_help and "TENURE_FENCE" in run_help


@pytest.mark.parametrize("command", [None, *COMMANDS])
def test_no_help_text_points_into_the_repository(
    command: str | None, capsys: pytest.CaptureFixture[str]
) -> None:
    # docs/ is in neither the wheel nor an installed tenure: help points at the manual's URL.
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"] if command is None else [command, "--help"])
    assert exit_info.value.code == 0
    text = capsys.readouterr().out
    assert MANUAL_URL in text or command is not None
    assert re.findall(r"(?<![/\w.])(?:docs|tests|src|scripts)/|\.md\b", text) == [], text


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--version"])
    assert capsys.readouterr().out.strip() == f"tenure {tenure.__version__}"


def test_run_takes_everything_after_double_dash_as_the_command() -> None:
    options = _parse(["run", "job", "--ttl", "5", "--", "ls", "-la", "--", "--ttl"])
    assert options.name == "job"
    assert options.ttl == 5.0
    assert options.argv == ["ls", "-la", "--", "--ttl"]
    assert options.url is None


def test_url_is_accepted_before_and_after_the_command() -> None:
    assert _parse(["--url", "memory://", "ls"]).url == "memory://"
    assert _parse(["ls", "--url", "memory://"]).url == "memory://"
    options = _parse(["--url", "run", "run", "job", "--", "true"])  # a URL that reads "run"
    assert options.url == "run" and options.argv == ["true"]
    assert _parse(["show", "--", "-dash"]).name == "-dash"


def test_defaults_are_as_documented() -> None:
    options = build_parser().parse_args(["run", "job"])
    assert options.ttl == 30.0
    assert options.timeout is None and not options.no_wait
    assert options.busy_exit_code == EXIT_BUSY and options.lost_exit_code == EXIT_LOST
    assert options.grace == 5.0
    assert options.hold_at_least is None  # no window: a release frees the name at once


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        (["run", "", "--", "true"], "lock name must not be empty"),
        (["run", "job", "--ttl", "-5", "--", "true"], "ttl must be > 0"),
        (["run", "job", "--ttl", "nan", "--", "true"], "ttl must be finite"),
        (["run", "job", "--ttl", "soon", "--", "true"], "invalid float value"),
        (["run", "job", "--timeout", "-1", "--", "true"], "timeout must be >= 0"),
        (["run", "job", "--no-wait", "--timeout", "1", "--", "true"], "not allowed with"),
        (["run", "job", "--busy-exit-code", "300", "--", "true"], "0..255"),
        (["run", "job", "--grace", "-1", "--", "true"], "--grace"),
        (["run", "job", "--hold-at-least", "-1", "--", "true"], "--hold-at-least must be >= 0"),
        (["run", "job", "--hold-at-least", "inf", "--", "true"],
         "--hold-at-least must be finite"),
        (["run", "job", "--hold-at-least", "nan", "--", "true"],
         "--hold-at-least must be finite"),
        (["run", "job", "--hold-at-least", "soon", "--", "true"], "invalid float value"),
        (["run", "job", "--semaphore", "2", "--hold-at-least", "5", "--", "true"],
         "--hold-at-least is for a lock, not a --semaphore"),
        (["run", "job"], "give the command after --"),
        (["run", "job", "true"], "unexpected 'true'"),
        (["run", "job", "--"], "give the command after --"),
        (["--url", "nosuch://x", "ls"], "unknown URL scheme 'nosuch'"),
        (["--url", "not a url", "ls"], "not a backend URL"),
        (["show", ""], "lock name must not be empty"),
        (["break", "x" * 2000], "the limit is 1024"),
        (["ls", "a", "b"], "unexpected argument 'b'"),
        (["demo", "--workers", "0"], "--workers"),
        (["demo", "--url", "memory://"], "memory:// is private"),
        (["frobnicate"], "invalid choice"),
        ([], "required"),
    ],
)
def test_bad_input_is_one_line_on_stderr_and_exit_2(
    arguments: list[str], expected: str, env: dict[str, str]
) -> None:
    result = tenure_command(*arguments, env=env)
    assert result.returncode == EXIT_USAGE, result
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("tenure: error: ")
    assert expected in lines[0]
    # Bad input never creates the default state file (validation comes before connecting).
    if "--url" not in arguments:
        assert not (pathlib.Path(env["XDG_STATE_HOME"]) / "tenure").exists()


def test_a_password_in_the_url_is_never_printed(env: dict[str, str]) -> None:
    # A sqlite URL with a host is refused, and the backend's message quotes the URL.
    result = tenure_command("--url", "sqlite://admin:hunter2@db.example/x.db", "ls", env=env)
    assert result.returncode == EXIT_USAGE
    assert "hunter2" not in result.stderr
    assert "admin:***@db.example" in result.stderr


def test_run_on_memory_exports_the_lock_name_and_fence(env: dict[str, str]) -> None:
    result = tenure_command(
        "--url", "memory://", "run", "orders:42", "--",
        "sh", "-c", 'echo "$TENURE_LOCK_NAME $TENURE_FENCE"; exit 7',
        env=env,
    )
    name, fence = result.stdout.split()
    assert name == "orders:42" and int(fence) > 0
    assert result.returncode == 7
    assert result.stderr == ""


def test_python_dash_m_tenure_is_the_same_command(env: dict[str, str]) -> None:
    result = tenure_command(
        "run", "job", "--url", "memory://", "--", sys.executable, "-c", "print('hi')",
        env=env, module=True,
    )
    assert (result.returncode, result.stdout) == (0, "hi\n")


def test_run_maps_a_signal_death_to_128_plus_the_signal(env: dict[str, str]) -> None:
    result = tenure_command("run", "job", "--url", "memory://", "--", "sh", "-c", "kill -9 $$",
                            env=env)
    assert result.returncode == 128 + 9


@pytest.mark.parametrize(
    ("command", "status", "message"),
    [("no-such-command-here", 127, "command not found"), ("/", 126, "cannot run '/'")],
)
def test_run_reports_a_command_that_cannot_start(
    command: str, status: int, message: str, env: dict[str, str]
) -> None:
    result = tenure_command("run", "job", "--url", "memory://", "--", command, env=env)
    assert result.returncode == status
    assert len(result.stderr.splitlines()) == 1 and message in result.stderr


def test_ls_on_memory_is_empty_as_each_process_has_its_own_store(env: dict[str, str]) -> None:
    result = tenure_command("ls", "--url", "memory://", env=env)
    assert (result.returncode, result.stdout) == (0, "no held locks or semaphores\n")
    result = tenure_command("ls", "--json", "--url", "memory://", env=env)
    assert (result.returncode, result.stdout) == (0, "[]\n")
    shown = tenure_command("show", "anything", "--url", "memory://", env=env)
    assert shown.returncode == 1 and "no such lock" in shown.stdout
    broken = tenure_command("break", "anything", "--url", "memory://", env=env)
    assert broken.returncode == 1 and "not held" in broken.stdout


@pytest.mark.parametrize(
    ("signum", "code", "forwarded"),
    [
        (signal.SIGINT, 0, True),  # SI_USER: kill(2) from a supervisor or a user
        (signal.SIGTERM, 0, True),
        (signal.SIGUSR1, -6, True),  # SI_TKILL
        (signal.SIGHUP, -1, True),  # SI_QUEUE
        (signal.SIGINT, SI_KERNEL, False),  # Ctrl-C: the terminal signalled CMD itself
        (signal.SIGQUIT, SI_KERNEL, False),  # Ctrl-\\
        (signal.SIGCHLD, 1, False),  # CLD_EXITED: news about CMD, not for CMD
    ],
)
def test_which_signals_are_forwarded(signum: int, code: int, forwarded: bool) -> None:
    # As Linux's inbox tells them apart: by the si_code sigtimedwait reports.
    assert should_forward(Arrival(signum, from_terminal=code == SI_KERNEL)) is forwarded


def test_an_unreachable_backend_exits_69_without_the_password(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    url = "redis://app:hunter%402@db.example:6379/0"

    def unreachable(given: str | None = None) -> tenure.Locks:
        raise tenure.BackendError(f"cannot reach {given}\n(user app)")

    monkeypatch.setattr(tenure, "connect", unreachable)
    assert main(["show", "job", "--url", url]) == 69
    error = capsys.readouterr().err
    # The URL a message quotes is printed redacted, on one line; only its password field
    # is hidden (the rest of the message is never rewritten: see the redaction test below).
    assert error == "tenure: error: cannot reach redis://app:***@db.example:6379/0 (user app)\n"


def test_an_internal_error_is_one_line_with_status_70(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def broken_connect(url: str | None = None) -> tenure.Locks:
        raise RuntimeError("simulated bug")

    monkeypatch.setattr(tenure, "connect", broken_connect)
    monkeypatch.delenv("TENURE_DEBUG", raising=False)
    assert main(["ls", "--url", "memory://"]) == 70
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "internal error: RuntimeError: simulated bug" in error
    monkeypatch.setenv("TENURE_DEBUG", "1")
    with pytest.raises(RuntimeError):
        main(["ls", "--url", "memory://"])


def test_an_unusable_default_location_is_a_usage_error_not_an_internal_one(
    env: dict[str, str],
) -> None:
    env = {k: v for k, v in env.items() if k != "XDG_STATE_HOME"}
    env["HOME"] = "/proc"  # no directory can be created there, even by root
    # (A command that only reads says the store does not exist and creates nothing; one
    # that takes a lock has to create it.)
    result = tenure_command("run", "job", "--", "true", env=env)
    assert result.returncode == 2, result.stderr
    assert "internal error" not in result.stderr
    assert "/proc/.local/state/tenure/locks.db" in result.stderr
    assert "TENURE_URL" in result.stderr


@pytest.mark.parametrize(
    ("password", "name"), [("s3cret", "lock-s3cret"), ("1", "job-1")]
)
def test_redaction_hides_the_password_field_and_nothing_else(
    env: dict[str, str], password: str, name: str
) -> None:
    # Port 1 refuses at once: the error quotes the URL, the name and the driver's message.
    url = f"redis://:{password}@127.0.0.1:1/0"
    result = tenure_command("show", name, "--url", url, env=env)
    assert result.returncode != 0
    assert f":{password}@" not in result.stderr
    assert "redis://:***@127.0.0.1:1/0" in result.stderr
    assert f"'{name}'" in result.stderr  # the lock's own name is printed as it is
    assert "127.0.0.1:1." in result.stderr  # so is the driver's "connecting to 127.0.0.1:1."


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        (["run", "x", "--bogus", "--", "true"],
         "run: unknown option '--bogus' (see 'tenure run --help')"),
        (["run", "x", "--bogus"], "run: unknown option '--bogus' (see 'tenure run --help')"),
        (["elect", "x", "--value", "v", "--bogus", "--", "true"],
         "elect: unknown option '--bogus' (see 'tenure elect --help')"),
        (["ls", "--bogus"], "ls: unknown option '--bogus' (see 'tenure ls --help')"),
        (["show", "x", "-z"], "show: unknown option '-z' (see 'tenure show --help')"),
        (["ls", "a", "b"], "ls: unexpected argument 'b' (see 'tenure ls --help')"),
    ],
)
def test_an_unknown_option_is_named_as_unknown(
    arguments: list[str], expected: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--url", "memory://", *arguments]) == EXIT_USAGE
    assert capsys.readouterr().err == f"tenure: error: {expected}\n"


def test_elect_takes_runs_waiting_and_reporting_flags() -> None:
    options = _parse(["elect", "x", "--value", "v", "-w", "3", "-E", "9", "-q",
                      "--lost-exit-code", "8", "--", "true"])
    assert (options.timeout, options.no_wait, options.busy_exit_code, options.verbosity,
            options.lost_exit_code) == (3.0, False, 9, -1, 8)
    options = _parse(["elect", "x", "--value", "v", "-n", "-v", "--", "true"])
    assert (options.no_wait, options.verbosity) == (True, 1)


def test_elect_no_wait_exits_with_the_busy_status_and_says_who_leads(
    env: dict[str, str], tmp_path: pathlib.Path
) -> None:
    url = f"sqlite:///{tmp_path / 'locks.db'}"
    marker = tmp_path / "ran"
    with tenure.connect(url) as locks, locks.election("chief", ttl=60).campaign(value="other"):
        told = tenure_command("--url", url, "elect", "chief", "--value", "me", "-n", "--",
                              "touch", str(marker), env=env)
        assert told.returncode == EXIT_BUSY
        assert "leadership of 'chief' is held (held by" in told.stderr
        silent = tenure_command("--url", url, "elect", "chief", "--value", "me", "-n", "-q",
                                "-E", "0", "--", "touch", str(marker), env=env)
        assert (silent.returncode, silent.stderr) == (0, "")
        waited = tenure_command("--url", url, "elect", "chief", "--value", "me", "-w", "0.3",
                                "--", "touch", str(marker), env=env)
        assert waited.returncode == EXIT_BUSY
        assert "leadership of 'chief' was not acquired within 0.3 s" in waited.stderr
    assert not marker.exists()


@pytest.mark.parametrize(
    ("arguments", "status", "said"),
    [
        (["ls"], 0, "nothing is locked: the SQLite store {path} does not exist (yet)\n"),
        (["ls", "--all", "--json"], 0, "[]\n"),
        (["show", "job"], 1, "job: nothing held: the SQLite store {path} does not exist (yet)\n"),
        (["show", "job", "--json"], 1, "null\n"),
        (["break", "job"], 1, "job: nothing held: the SQLite store {path} does not exist (yet)\n"),
        (["leader", "job"], 1, "no leader: the SQLite store {path} does not exist (yet)\n"),
    ],
)
@pytest.mark.parametrize("where", ["default", "homeless default", "url"])
def test_reading_a_store_that_does_not_exist_creates_nothing(
    arguments: list[str], status: int, said: str, where: str, env: dict[str, str],
    tmp_path: pathlib.Path,
) -> None:
    if where == "url":
        path = tmp_path / "dir" / "locks.db"
        env["TENURE_URL"] = f"sqlite:///{path}"
    elif where == "homeless default":
        # Debian's convention for system users: HOME=/nonexistent (here, inside tmp_path).
        del env["XDG_STATE_HOME"]
        env["HOME"] = str(tmp_path / "nonexistent")
        path = tmp_path / "nonexistent" / ".local" / "state" / "tenure" / "locks.db"
    else:
        path = pathlib.Path(env["XDG_STATE_HOME"]) / "tenure" / "locks.db"
    result = tenure_command(*arguments, env=env)
    assert (result.returncode, result.stdout, result.stderr) == (
        status, said.format(path=path), ""
    )
    assert list(tmp_path.iterdir()) == []  # no file, no directory, no home


def test_completing_names_from_a_store_that_does_not_exist_creates_nothing(
    env: dict[str, str], tmp_path: pathlib.Path
) -> None:
    bash = shutil.which("bash")
    assert bash is not None
    env["PATH"] = f"{TENURE.parent}{os.pathsep}{env['PATH']}"
    script = tenure_command("completion", "bash", env=env).stdout
    completed = subprocess.run(
        [bash, "-c", script + '\nCOMP_LINE="tenure show j"; COMP_POINT=${#COMP_LINE}; _tenure; '
         'printf "%s\\n" "${COMPREPLY[@]}"'],
        env=env, capture_output=True, text=True, timeout=60, check=True,
    )
    assert completed.stdout.strip() == ""
    assert list(tmp_path.iterdir()) == []
