"""Options ``tenure run`` and ``tenure elect`` share: the lease, how long to wait, what to
say, the exit status when nothing was obtained (flock(1)'s -n, -w, -E; -q and -v) and what
happens on loss (--lost-exit-code, --grace); checked, the parsed options of either become
one ``RunOptions`` for ``tenure.cli.run``."""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Sequence

from tenure._errors import InvalidArgument
from tenure._validation import (
    validate_hold_at_least,
    validate_limit,
    validate_name,
    validate_timeout,
    validate_ttl,
    validate_weight,
)
from tenure.cli import EXIT_BUSY, EXIT_LOST, CommandError
from tenure.cli.progress import QUIET, VERBOSE

__all__ = ["RunOptions", "add_hold_options", "add_wait_options", "run_options"]


@dataclasses.dataclass(frozen=True)
class RunOptions:
    name: str
    command: Sequence[str]
    url: str | None
    ttl: float
    timeout: float | None
    """None: wait forever."""
    no_wait: bool
    busy_exit_code: int
    lost_exit_code: int
    grace: float
    """Seconds between SIGTERM and SIGKILL when the lease is lost."""
    semaphore: int | None = None
    """Hold one permit of the semaphore NAME with this limit instead of the lock NAME."""
    weight: int = 1
    """The units of the semaphore's limit that permit takes (``--weight``)."""
    verbosity: int = 0
    """-1 quiet (errors only), 0 default, 1 verbose: see ``tenure.cli.progress``."""
    hold_at_least: float = 0.0
    """Keep the lock NAME held until this many seconds after its grant, even when CMD ends
    sooner (``locks.lock(..., hold_at_least=)``): one run per window across nodes."""
    leader_value: str | None = None
    """Campaign in the election NAME with this value instead of taking the lock NAME
    (``tenure elect``): CMD runs while this process is the leader."""


def add_wait_options(parser: argparse.ArgumentParser, obtained: str) -> None:
    """Add -w/--timeout, -n/--no-wait, -E/--busy-exit-code, -q and -v to ``parser``;
    ``obtained`` says what is waited for in the help ("the lock", "leadership")."""
    wait = parser.add_mutually_exclusive_group()
    wait.add_argument("-w", "--timeout", "--wait", type=float, default=None, metavar="S",
                      help=f"wait at most S seconds for {obtained} (default: wait forever)")
    wait.add_argument("-n", "--no-wait", "--nonblock", "--nb", action="store_true",
                      help=f"try once; if {obtained} is taken, exit at once")
    parser.add_argument("-E", "--busy-exit-code", "--conflict-exit-code", type=int,
                        dest="busy_exit_code", default=EXIT_BUSY, metavar="N",
                        help=f"exit status when {obtained} is not obtained "
                             f"(default: {EXIT_BUSY})")
    talk = parser.add_mutually_exclusive_group()
    talk.add_argument("-q", "--quiet", dest="verbosity", action="store_const", const=QUIET,
                      default=0,
                      help=f"say nothing when {obtained} is taken or waited for (the exit "
                           "status tells); errors are still printed")
    talk.add_argument("-v", "--verbose", dest="verbosity", action="store_const", const=VERBOSE,
                      help="report the wait: a live line on a terminal, else one line when it "
                           f"starts and one when {obtained} is obtained; with -v, also the "
                           "backend driver's own log lines")


def add_hold_options(
    parser: argparse.ArgumentParser, obtained: str, *, ttl: str, lost: str
) -> None:
    """Add what ``tenure run`` and ``tenure elect`` share: --ttl (``ttl``: its help, what the
    lease bounds), the wait options (``add_wait_options``), --lost-exit-code and --grace
    (``lost``: what loss is, "the lease is lost")."""
    parser.add_argument("--ttl", type=float, default=30.0, metavar="S",
                        help=f"{ttl} (default: 30)")
    add_wait_options(parser, obtained)
    parser.add_argument("--lost-exit-code", type=int, default=EXIT_LOST, metavar="N",
                        help=f"exit status when {lost} while CMD runs (default: {EXIT_LOST})")
    parser.add_argument("--grace", type=float, default=5.0, metavar="S",
                        help=f"seconds between SIGTERM and SIGKILL when {lost} (default: 5)")


def run_options(
    options: argparse.Namespace, *, semaphore: int | None = None, leader_value: str | None = None,
    hold_at_least: float | None = None, weight: int | None = None,
) -> RunOptions:
    """The checked options of ``tenure run`` (with its ``semaphore`` limit, permit
    ``weight`` and ``hold_at_least``, if any) or ``tenure elect`` (with its
    ``leader_value``); the first bad one raises, in the order the commands have always
    checked them."""
    if options.timeout is not None:
        validate_timeout(options.timeout)
    for flag in ("busy_exit_code", "lost_exit_code"):
        code = getattr(options, flag)
        if not 0 <= code <= 255:
            raise CommandError(f"--{flag.replace('_', '-')} must be 0..255, not {code}")
    if not options.grace >= 0:
        raise CommandError(f"--grace must be >= 0 seconds, not {options.grace}")
    if semaphore is not None:
        validate_limit(semaphore)
        if hold_at_least:
            raise CommandError("--hold-at-least is for a lock, not a --semaphore")
    if weight is not None:
        if semaphore is None:
            raise CommandError("--weight is for a --semaphore permit: give --semaphore N")
        validate_weight(weight, semaphore)
    held_for = _hold_at_least(hold_at_least)
    return RunOptions(
        name=validate_name(options.name),
        command=options.argv,
        url=options.url,
        ttl=validate_ttl(options.ttl),
        timeout=options.timeout,
        no_wait=options.no_wait,
        busy_exit_code=options.busy_exit_code,
        lost_exit_code=options.lost_exit_code,
        grace=options.grace,
        semaphore=semaphore,
        weight=1 if weight is None else weight,
        hold_at_least=held_for,
        verbosity=options.verbosity,
        leader_value=leader_value,
    )


def _hold_at_least(seconds: float | None) -> float:
    """``--hold-at-least``, checked as ``locks.lock`` checks it, said as the option."""
    try:
        return validate_hold_at_least(seconds)
    except InvalidArgument as exc:
        raise CommandError(str(exc).replace("hold_at_least", "--hold-at-least")) from None
