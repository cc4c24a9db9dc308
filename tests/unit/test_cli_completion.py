"""Tab completion of lock names in the real shells: names with colons (bash splits its words
at ':', and the docs' own names are orders:42) and names with spaces, in bash, zsh and fish.
bash and zsh run interactively on a pseudo-terminal, where a typed Tab completes the line,
which is then run: `tenure show NAME` prints the name it was given."""

from __future__ import annotations

import os
import pathlib
import pty
import select
import shutil
import subprocess
import sys
import time

import pytest

import tenure
from tenure.cli.main import main

pytestmark = pytest.mark.sqlite

TENURE = pathlib.Path(sys.executable).parent / "tenure"
NAMES = ("jobs:nightly", "two words", "orders:4:2 and more")
"""Held while each test runs: only one of them completes each typed prefix."""


@pytest.fixture
def env(tmp_path: pathlib.Path) -> dict[str, str]:
    environment = {k: v for k, v in os.environ.items() if k != "TENURE_DEBUG"}
    environment["PATH"] = f"{TENURE.parent}{os.pathsep}{environment['PATH']}"
    environment["TENURE_URL"] = f"sqlite:///{tmp_path / 'locks.db'}"
    environment["TERM"] = "dumb"
    return environment


@pytest.fixture
def held(env: dict[str, str]) -> object:
    with tenure.connect(env["TENURE_URL"]) as locks:
        leases = [locks.lock(name, 600) for name in NAMES]
        for lease in leases:
            assert lease.acquire(timeout=10)
        yield leases
        for lease in leases:
            lease.release()


def script(shell: str, tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> str:
    assert main(["completion", shell]) == 0
    path = tmp_path / f"tenure.{shell}"
    path.write_text(capsys.readouterr().out)
    return str(path)


def interactive(argv: list[str], typed: str, expected: str, env: dict[str, str]) -> str:
    """Type ``typed`` into an interactive shell on a pseudo-terminal until ``expected``
    appears in what it prints (or 60 s pass); everything it printed."""
    pid, terminal = pty.fork()
    if pid == 0:  # the child: becomes the shell
        os.execvpe(argv[0], argv, env)
    seen = b""
    try:
        os.write(terminal, typed.encode())
        deadline = time.monotonic() + 60
        while expected.encode() not in seen and time.monotonic() < deadline:
            ready, _, _ = select.select([terminal], [], [], 0.1)
            if ready:
                try:
                    seen += os.read(terminal, 4096)
                except OSError:  # the shell is gone
                    break
        os.write(terminal, b"exit\n")
    finally:
        os.close(terminal)
        os.waitpid(pid, 0)
    return seen.decode(errors="replace")


@pytest.mark.parametrize(
    ("prefix", "name"),
    [("jobs:n", "jobs:nightly"), ("tw", "two words"), ("orders:4:", "orders:4:2 and more"),
     ("two\\ w", "two words")],
)
@pytest.mark.parametrize("shell", ["bash", "zsh"])
def test_a_tab_completes_names_with_colons_and_spaces(
    shell: str, prefix: str, name: str, held: object, env: dict[str, str],
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str],
) -> None:
    assert shutil.which(shell), f"{shell} is not installed"
    loaded = script(shell, tmp_path, capsys)
    if shell == "bash":
        argv = ["bash", "--norc", "--noprofile", "-i"]
        setup = f"source '{loaded}'\n"
    else:
        argv = ["zsh", "-f", "-i"]
        setup = f"autoload -Uz compinit && compinit -u -D\nsource '{loaded}'\n"
    expected = f"name:     {name}"
    shown = interactive(argv, f"{setup}tenure show {prefix}\t\n", expected, env)
    assert expected in shown, shown[-2000:]


@pytest.mark.parametrize(
    ("line", "completed"),
    [("tenure show jobs:n", "jobs:nightly"), ("tenure show tw", "two words"),
     ("tenure show orders:4:", "orders:4:2 and more"), ("tenure break 'two w", "two words")],
)
def test_fish_completes_names_with_colons_and_spaces(
    line: str, completed: str, held: object, env: dict[str, str], tmp_path: pathlib.Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert shutil.which("fish"), "fish is not installed"
    loaded = script("fish", tmp_path, capsys)
    result = subprocess.run(
        ["fish", "--no-config", "-c", f"source '{loaded}'; complete -C $argv[1]", line],
        env=env, capture_output=True, text=True, check=True, timeout=60,
    )
    assert [row.split("\t")[0] for row in result.stdout.splitlines()] == [completed]


def test_ls_names_prints_each_name_once_as_it_is(
    held: object, env: dict[str, str], tmp_path: pathlib.Path
) -> None:
    with tenure.connect(env["TENURE_URL"]) as locks:
        permit = locks.semaphore("jobs:nightly", limit=2, ttl=60)  # a second record, one name
        assert permit.acquire(timeout=10)
        listed = subprocess.run([str(TENURE), "ls", "--all", "--names"], env=env,
                                capture_output=True, text=True, check=True, timeout=60)
        permit.release()
    assert listed.stdout.splitlines() == sorted(NAMES)
