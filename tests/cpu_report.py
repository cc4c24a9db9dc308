"""``--cpu-report N``: the N tests that cost the most CPU, servers and child processes included.

For each test (set-up, call and tear-down) it adds up the CPU seconds that the test process
and every process below it spent: its own, its reaped children's, and each live
descendant's (with what that descendant reaped: PostgreSQL's backends, say), read from /proc
before and after. A session server's start-up is charged to the first test that needs it,
its idle polling to the tests it idles through. Under pytest-xdist every worker writes its
rows to a shared directory and the controller prints one table, with the total, so that the
CPU a run burns without testing anything (interpreter start-ups, idle servers) shows up
beside the CPU of the tests themselves.
"""

from __future__ import annotations

import os
import pathlib
import tempfile
from collections.abc import Iterator

import pytest

from tests.servers._process import cpu_seconds, descendants

_DIRECTORY = "TENURE_CPU_REPORT_DIR"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--cpu-report", type=int, default=0, metavar="N",
        help="print the N tests that used the most CPU, servers and subprocesses included",
    )


def _tree_cpu() -> float:
    """CPU seconds of this process, its reaped children and every live descendant."""
    own = os.times()
    total = own.user + own.system + own.children_user + own.children_system
    return total + sum(cpu_seconds(pid) for pid in descendants(os.getpid()))


def pytest_configure(config: pytest.Config) -> None:
    if not config.getoption("--cpu-report"):
        return
    if not hasattr(config, "workerinput"):
        # The controller (or a run without workers) picks the directory; xdist's workers
        # inherit the environment.
        os.environ[_DIRECTORY] = tempfile.mkdtemp(prefix="tenure-cpu-")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[None]:
    if not item.config.getoption("--cpu-report"):
        yield
        return
    before = _tree_cpu()
    yield
    spent = _tree_cpu() - before
    rows = pathlib.Path(os.environ[_DIRECTORY]) / f"{os.getpid()}.tsv"
    with rows.open("a") as table:
        table.write(f"{spent:.3f}\t{item.nodeid}\n")


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter,
                            config: pytest.Config) -> None:
    count = config.getoption("--cpu-report")
    if not count or hasattr(config, "workerinput"):
        return
    rows: list[tuple[float, str]] = []
    for table in pathlib.Path(os.environ[_DIRECTORY]).glob("*.tsv"):
        for line in table.read_text().splitlines():
            spent, nodeid = line.split("\t", 1)
            rows.append((float(spent), nodeid))
    rows.sort(reverse=True)
    terminalreporter.section(f"CPU of the {count} costliest tests (servers included)")
    for spent, nodeid in rows[:count]:
        terminalreporter.write_line(f"{spent:8.1f} s  {nodeid}")
    terminalreporter.write_line(
        f"{sum(spent for spent, _ in rows):8.1f} s  all {len(rows)} tests together"
    )
