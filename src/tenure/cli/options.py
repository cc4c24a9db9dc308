"""Options ``tenure run`` and ``tenure elect`` share: how long to wait, what to say, and
the exit status when nothing was obtained (flock(1)'s -n, -w, -E; -q and -v)."""

from __future__ import annotations

import argparse

from tenure.cli import EXIT_BUSY
from tenure.cli.progress import QUIET, VERBOSE

__all__ = ["add_wait_options"]


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
