"""Run one stage of scripts/test and record what it cost.

    python scripts/stage.py SUMMARY NAME [--log FILE] -- COMMAND ARGS...

Runs COMMAND (its output to FILE when given, else inherited), then appends one tab-separated
line to SUMMARY: the stage's name, its exit status, its wall seconds and the CPU seconds
(user + system) of COMMAND and every process below it. The servers the tests start count
too: those a test process stops are its children, reaped by it; those shared by every
pytest-xdist worker outlive the worker that started them, are orphaned and then reparented
here (this process is the stage's child subreaper), reaped and counted once the controller
stops them. Exits with COMMAND's status.

    python scripts/stage.py SUMMARY --report

prints the recorded stages as a table, with the whole run's wall time (the first start to
the last end, stages overlap) and the total CPU seconds.
"""

from __future__ import annotations

import ctypes
import os
import pathlib
import subprocess
import sys
import time

ORPHANS_GRACE = 30.0
"""Seconds the stage's orphans (reparented here) may take to end after COMMAND did."""


def become_subreaper() -> None:
    """Orphans below this process are reparented to it, not to init (Linux 3.4+), so that
    their CPU is counted when they are reaped here."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: orphans go uncounted
        pass


PR_SET_CHILD_SUBREAPER = 36


def reap_orphans() -> float:
    """Reap the orphans reparented here, for up to ORPHANS_GRACE seconds; their CPU. A
    process still running then is named on stderr and left alone (something leaked it)."""
    cpu = 0.0
    deadline = time.monotonic() + ORPHANS_GRACE
    while True:
        try:
            pid, _, usage = os.wait4(-1, os.WNOHANG)
        except ChildProcessError:
            return cpu
        if pid:
            cpu += usage.ru_utime + usage.ru_stime
            continue
        if time.monotonic() > deadline:
            print(f"stage: processes still running after {ORPHANS_GRACE:.0f} s, not counted",
                  file=sys.stderr)
            return cpu
        time.sleep(0.1)


def run(summary: pathlib.Path, name: str, log: pathlib.Path | None, command: list[str]) -> int:
    started = time.time()
    become_subreaper()
    output = log.open("wb") if log is not None else None
    try:
        errors = subprocess.STDOUT if output is not None else None
        process = subprocess.Popen(command, stdout=output, stderr=errors)
        # wait4 returns the rusage of the child and of every descendant it waited for.
        _, status, usage = os.wait4(process.pid, 0)
    finally:
        if output is not None:
            output.close()
    code = os.waitstatus_to_exitcode(status)
    ended = time.time()
    cpu = usage.ru_utime + usage.ru_stime + reap_orphans()
    with summary.open("a") as table:
        table.write(f"{name}\t{code}\t{started:.3f}\t{ended:.3f}\t{cpu:.1f}\n")
    return code


def report(summary: pathlib.Path) -> None:
    rows = [line.split("\t") for line in summary.read_text().splitlines() if line]
    if not rows:
        return
    first = min(float(row[2]) for row in rows)
    last = max(float(row[3]) for row in rows)
    width = max(len(row[0]) for row in rows)
    print(f"{'stage':<{width}}  {'status':>6}  {'wall s':>8}  {'cpu s':>8}")
    for name, code, start, end, cpu in rows:
        wall = float(end) - float(start)
        print(f"{name:<{width}}  {code:>6}  {wall:>8.1f}  {float(cpu):>8.1f}")
    total_cpu = sum(float(row[4]) for row in rows)
    print(f"{'all (overlapping)':<{width}}  {'':>6}  {last - first:>8.1f}  {total_cpu:>8.1f}")


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[1] == "--report":
        report(pathlib.Path(argv[0]))
        return 0
    if "--" not in argv or argv.index("--") < 2:
        print(__doc__, file=sys.stderr)
        return 2
    split = argv.index("--")
    summary, name, *options = argv[:split]
    log = None
    if options:
        if options[0] != "--log" or len(options) != 2:
            print(__doc__, file=sys.stderr)
            return 2
        log = pathlib.Path(options[1])
    return run(pathlib.Path(summary), name, log, argv[split + 1 :])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
