"""``tenure verify``: run a randomized workload against a store, record it, and check that
the store's answers are those of a fenced lease (``tenure.verify``); or check a saved history.

Exit 0 when the history is linearizable, 1 with the excerpt that has no valid order, 2 on
bad usage, 3 when the checker's time budget ran out first (no verdict).
"""

from __future__ import annotations

import argparse
import logging
import math
import pathlib
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, TextIO

from tenure._urls import redact
from tenure.cli import EXIT_NOTHING, EXIT_OK, EXIT_UNAVAILABLE, EXIT_USAGE, CommandError

if TYPE_CHECKING:
    from tenure.verify import Operation, Report

__all__ = ["COMMANDS", "EXIT_UNDECIDED", "add_commands"]

COMMANDS = ("verify",)
EXIT_UNDECIDED = 3
"""``verify``: the checker's time budget (--budget) ran out before a verdict."""
MAX_SHOWN = 3
"""Violations described in full (the others are counted)."""

CommandFactory = Callable[..., argparse.ArgumentParser]
"""``command(name, summary, description, epilog)`` of ``tenure.cli.main.build_parser``."""

EPILOG = f"""\
examples:
  tenure verify --url redis://cache:6379/0 --seconds 60 --save run.jsonl
  tenure verify --url etcd://etcd:2379 --rwlock --seconds 60
  tenure verify --check run.jsonl --html timeline.html

exit status:
  0     linearizable: some order of the calls is what a fenced lease answers
  {EXIT_NOTHING}     not linearizable: the excerpt printed has no valid order
  {EXIT_USAGE}     bad input: arguments, URL, a malformed history file
  {EXIT_UNDECIDED}     undecided: the check ran out of --budget
  {EXIT_UNAVAILABLE}    the backend is unreachable or failing (a client could not run)
"""


def add_commands(command: CommandFactory) -> None:
    """Register ``verify`` with the parser's command factory."""
    verify = command(
        "verify",
        "check that a store really behaves as a lease store",
        "Run --clients processes that acquire, extend, release and inspect --names locks "
        "(under a prefix of their own) for --seconds, record every call, and check that "
        "some order of the calls, each placed between its invocation and its answer, is "
        "what a fenced lease would answer: at most one live holder, expiry only once the "
        "ttl may have run out, fences strictly increasing, 'not held' only where the lease "
        "may have ended (--semaphore, --rwlock or --election, one at most: the rules of those "
        "primitives instead). Exit 0 if so, 1 with the smallest excerpt that "
        "has no valid order "
        f"and why, {EXIT_UNDECIDED} if the check ran out of --budget. With --check FILE, "
        "check a saved history instead of running one.",
        EPILOG,
    )
    verify.add_argument("--clients", type=int, default=4, metavar="N",
                        help="client processes (default: 4)")
    verify.add_argument("--seconds", type=float, default=10.0, metavar="S",
                        help="how long the clients run (default: 10)")
    verify.add_argument("--names", type=int, default=2, metavar="K",
                        help="lock names the clients share (default: 2)")
    verify.add_argument("--ttl", type=float, default=1.0, metavar="T",
                        help="the leases' ttl in seconds: short, so that leases expire "
                             "during the run (default: 1)")
    verify.add_argument("--semaphore", type=int, default=None, metavar="N",
                        help="use counting semaphores of N permits instead of locks (at most "
                             "N live holders per name)")
    verify.add_argument("--rwlock", action="store_true",
                        help="use read-write locks instead of locks: clients take the read "
                             "side, or less often the write side (also as a fair lock); "
                             "checked: a writer alone, readers never with a writer, write "
                             "fences above every earlier fence, read fences above every "
                             "earlier write's, inspect() listing the live leases")
    verify.add_argument("--election", action="store_true",
                        help="use elections instead of locks: clients campaign, resign and "
                             "ask leader(); checked: one leader at a time, terms strictly "
                             "increasing, leader() naming the live leader with its term")
    verify.add_argument("--save", default=None, metavar="FILE",
                        help="write the recorded history to FILE (JSON lines)")
    verify.add_argument("--check", default=None, metavar="FILE",
                        help="check the history saved in FILE; run nothing")
    verify.add_argument("--html", default=None, metavar="FILE",
                        help="write a timeline of the calls (the violating ones marked) to FILE")
    verify.add_argument("--budget", type=float, default=60.0, metavar="S",
                        help="seconds the check may take before it answers 'undecided' "
                             "(default: 60)")
    verify.add_argument("--seed", type=int, default=None, metavar="N",
                        help="seed the clients' choices (default: random)")
    verify.set_defaults(handler=_verify)


def _verify(options: argparse.Namespace) -> int:
    from tenure.verify import check
    from tenure.verify.jsonl import load, save

    _validate(options)
    out = sys.stdout
    if options.check is not None:
        try:
            history, about = load(options.check)
        except OSError as exc:
            raise CommandError(f"cannot read {options.check}: {exc.strerror}") from None
        if about:
            out.write(f"checking {options.check}: " + ", ".join(
                f"{key} {redact(str(about[key])) if key == 'url' else about[key]}"
                for key in ("url", "primitive", "clients", "seconds", "ttl")
                if key in about) + "\n")
    else:
        from tenure.verify.workload import (
            ClientFailed,
            WorkloadOptions,
            describe_run,
            run_workload,
        )

        run = WorkloadOptions(url=options.url, clients=options.clients, seconds=options.seconds,
                              names=options.names, ttl=options.ttl, seed=options.seed,
                              semaphore=options.semaphore, rwlock=options.rwlock,
                              election=options.election)
        # Leases the run loses on purpose are not news.
        logging.getLogger("tenure").setLevel(logging.ERROR)
        try:
            history = run_workload(run)
        except ClientFailed as exc:
            raise CommandError(str(exc), EXIT_UNAVAILABLE) from None
        about = describe_run(run)
        if options.save is not None:
            save(options.save, history, about)
    report = check(history, budget=options.budget)
    return _report(report, options, history, out)


def _validate(options: argparse.Namespace) -> None:
    if not 1 <= options.clients <= 64:
        raise CommandError(f"--clients must be 1..64, not {options.clients}")
    if not (0 < options.seconds <= 86_400):
        raise CommandError(f"--seconds must be > 0, not {options.seconds}")
    if not 1 <= options.names <= 1000:
        raise CommandError(f"--names must be 1..1000, not {options.names}")
    if not (0.05 <= options.ttl <= 3600) or math.isnan(options.ttl):
        raise CommandError(f"--ttl must be 0.05..3600 seconds, not {options.ttl}")
    if options.semaphore is not None and not 1 <= options.semaphore <= 1000:
        raise CommandError(f"--semaphore must be 1..1000 permits, not {options.semaphore}")
    chosen = [flag for flag, given in (("--semaphore", options.semaphore is not None),
                                       ("--rwlock", options.rwlock),
                                       ("--election", options.election)) if given]
    if len(chosen) > 1:
        raise CommandError(f"{' and '.join(chosen)}: a run checks one primitive, give one")
    if not options.budget > 0:
        raise CommandError(f"--budget must be > 0 seconds, not {options.budget}")
    if options.check is not None and options.save is not None:
        raise CommandError("--save writes a new run's history; --check reads one: not both")


def _report(report: Report, options: argparse.Namespace, history: list[Operation],
            out: TextIO) -> int:
    from tenure.verify import describe_violation
    from tenure.verify.timeline import write_timeline

    kinds: dict[str, int] = {}
    for op in history:
        key = f"{op.kind} {op.outcome}"
        kinds[key] = kinds.get(key, 0) + 1
    out.write(report.summary() + f" (checked in {report.seconds:.2f} s)\n")
    out.write("  calls: " + ", ".join(f"{key} {count}" for key, count in sorted(kinds.items()))
              + "\n")
    for violation in report.violations[:MAX_SHOWN]:
        out.write("\n" + describe_violation(violation) + "\n")
    if len(report.violations) > MAX_SHOWN:
        out.write(f"\n({len(report.violations) - MAX_SHOWN} more names violate; --save the "
                  "history and check it with tenure.verify.check for all of them)\n")
    if options.html is not None:
        write_timeline(pathlib.Path(options.html), history, report)
        out.write(f"timeline written to {options.html}\n")
    if report.linearizable is None:
        return EXIT_UNDECIDED
    return EXIT_OK if report.linearizable else EXIT_NOTHING
