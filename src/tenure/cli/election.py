"""``tenure leader NAME [--watch]`` and ``tenure elect NAME --value V -- CMD``.

``leader`` prints the election's leader (value, term, holder, since), or follows every change
with ``--watch`` (one line each, "no leader" for the gaps). ``elect`` campaigns and runs CMD
while this process leads: it is ``tenure run`` with a leadership for the lease, so signals,
loss (CMD terminated, exit 76) and exit statuses are exactly those of ``tenure run``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import TextIO

import tenure
from tenure._validation import validate_name
from tenure.cli import EXIT_BUSY, EXIT_LOST, EXIT_NOTHING, EXIT_OK, CommandError
from tenure.cli.options import add_wait_options, run_options

__all__ = ["COMMANDS", "add_commands", "describe_leader"]

COMMANDS = ("leader", "elect")
"""Commands whose CMD follows ``--`` (``elect``) are parsed like ``run``'s."""

CommandFactory = Callable[[str, str, str], argparse.ArgumentParser]


def add_commands(command: CommandFactory) -> None:
    """Register ``leader`` and ``elect`` with the parser's command factory."""
    leader = command(
        "leader",
        "print an election's leader",
        "Print the leader of the election NAME: its value, term (the fence of its win, "
        "strictly increasing), holder and since when. Exit 0 if there is a leader, 1 if none. "
        "With --watch, print the current leader and then one line per change (a new term, a "
        "new value, or 'no leader' for the gap between two terms) until interrupted.",
    )
    leader.add_argument("name", metavar="NAME", help="the election's name")
    leader.add_argument("--watch", action="store_true", help="follow every change")
    leader.add_argument("--interval", type=float, default=None, metavar="S",
                        help="--watch reads the server every S seconds (default: 0.1)")
    leader.set_defaults(handler=_leader)

    elect = command(
        "elect",
        "run a command while this process is the leader",
        "Campaign in the election NAME with --value V (renewed in the background at ttl/3), "
        "run CMD once elected, resign when it ends, and exit with its status. If leadership "
        f"is not won (-n, -w), nothing runs and tenure exits {EXIT_BUSY}. If leadership "
        "is lost while CMD runs, CMD gets SIGTERM, then SIGKILL after --grace seconds, and "
        f"tenure exits {EXIT_LOST}, as `tenure run` does.",
    )
    elect.usage = "tenure elect NAME --value V [options] -- CMD [ARGS...]"
    elect.add_argument("name", metavar="NAME", help="the election's name")
    elect.add_argument("--value", required=True, metavar="V",
                       help="this candidate's value, shown by `tenure leader` (e.g. host:port)")
    elect.add_argument("--ttl", type=float, default=30.0, metavar="S",
                       help="leadership lease in seconds; a dead leader is replaced after at "
                            "most this long (default: 30)")
    add_wait_options(elect, "leadership")
    elect.add_argument("--lost-exit-code", type=int, default=EXIT_LOST, metavar="N",
                       help=f"exit status when leadership is lost while CMD runs "
                            f"(default: {EXIT_LOST})")
    elect.add_argument("--grace", type=float, default=5.0, metavar="S",
                       help="seconds between SIGTERM and SIGKILL on loss (default: 5)")
    elect.set_defaults(handler=_elect)


def describe_leader(leader: tenure.Leader | None) -> str:
    if leader is None:
        return "no leader"
    since = "-" if leader.since is None else leader.since.strftime("%Y-%m-%dT%H:%M:%SZ")
    value = "" if leader.value is None else leader.value
    shown = value.encode("unicode_escape").decode("ascii")
    return (
        f"{shown} term {leader.term} holder {leader.holder.host}:{leader.holder.pid} "
        f"since {since}"
    )


def _leader(options: argparse.Namespace, out: TextIO | None = None) -> int:
    out = sys.stdout if out is None else out
    name = validate_name(options.name)
    interval = 0.1 if options.interval is None else options.interval
    if not interval > 0:
        raise CommandError(f"--interval must be > 0 seconds, not {options.interval}")
    if not options.watch:
        from tenure.cli.inspect import absent_store

        if (absent := absent_store(options.url)) is not None:
            out.write(f"no leader: the SQLite store {absent} does not exist (yet)\n")
            return EXIT_NOTHING
    with tenure.connect(options.url) as locks:
        election = locks.election(name)
        if not options.watch:
            leader = election.leader()
            out.write(describe_leader(leader) + "\n")
            return EXIT_OK if leader is not None else EXIT_NOTHING
        for change in election.observe(interval=interval):
            out.write(describe_leader(change) + "\n")
            out.flush()
    return EXIT_OK


def _elect(options: argparse.Namespace) -> int:
    from tenure.cli.run import run

    return run(run_options(options, leader_value=options.value))
