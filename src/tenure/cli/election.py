"""``tenure leader NAME [--watch]`` and ``tenure elect NAME --value V -- CMD``.

``leader`` prints the election's leader (value, term, holder, since), or follows every change
with ``--watch`` (one line each, "no leader" for the gaps). ``elect`` campaigns and runs CMD
while this process leads: it is ``tenure run`` with a leadership for the lease, so signals,
loss (CMD terminated, exit 76) and exit statuses are exactly those of ``tenure run``.
"""

from __future__ import annotations

import argparse
import queue
import signal
import sys
import threading
from collections.abc import Callable
from typing import TextIO

import tenure
from tenure._validation import validate_name
from tenure.cli import (
    EXIT_BUSY,
    EXIT_LOST,
    EXIT_NOTHING,
    EXIT_OK,
    EXIT_SIGNAL_BASE,
    CommandError,
)
from tenure.cli.options import add_hold_options, run_options
from tenure.cli.signals import inbox

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
        "new value, or 'no leader' for the gap between two terms) until SIGINT, SIGTERM or "
        "SIGHUP (exit 128 + the signal's number).",
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
    add_hold_options(
        elect, "leadership", lost="leadership is lost",
        ttl="leadership lease in seconds; a dead leader is replaced after at most this long",
    )
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


STOPPING = frozenset({signal.SIGHUP, signal.SIGINT, signal.SIGTERM})
"""The signals that end ``tenure leader --watch``."""


def _leader(options: argparse.Namespace, out: TextIO | None = None) -> int:
    out = sys.stdout if out is None else out
    name = validate_name(options.name)
    interval = 0.1 if options.interval is None else options.interval
    if not interval > 0:
        raise CommandError(f"--interval must be > 0 seconds, not {options.interval}")
    if options.watch:
        return _watch(options.url, name, interval, out)
    from tenure.cli.inspect import absent_store

    if (absent := absent_store(options.url)) is not None:
        out.write(f"no leader: the SQLite store {absent} does not exist (yet)\n")
        return EXIT_NOTHING
    with tenure.connect(options.url) as locks:
        leader = locks.election(name).leader()
        out.write(describe_leader(leader) + "\n")
        return EXIT_OK if leader is not None else EXIT_NOTHING


def _watch(url: str | None, name: str, interval: float, out: TextIO) -> int:
    """Follow the election until a signal in ``STOPPING``. The reads run on a thread of
    their own and the signals are taken here, never raised mid-call: a Ctrl-C raised as
    KeyboardInterrupt inside the HTTP driver's connection pool could leave its lock taken
    (the exit then hung closing the pool) or be swallowed by a stream's clean-up (the
    watch then went on)."""
    changes: queue.SimpleQueue[tuple[tenure.Leader | None] | BaseException] = (
        queue.SimpleQueue()
    )

    def observe() -> None:
        try:
            with tenure.connect(url) as locks:
                for change in locks.election(name).observe(interval=interval):
                    changes.put((change,))
        except BaseException as exc:  # told to the main thread, which exits with it
            changes.put(exc)

    with inbox(STOPPING) as taken:
        # Started inside the inbox: the thread, and the driver's threads it starts,
        # inherit the blocked signals.
        threading.Thread(target=observe, name="tenure-observer", daemon=True).start()
        while True:
            for arrival in taken.take(0):
                out.flush()
                # The reading thread is left as it is: it holds no lease, and ends with
                # the process.
                return EXIT_SIGNAL_BASE + arrival.signum
            try:
                change = changes.get(timeout=0.05)
            except queue.Empty:
                continue
            if isinstance(change, BaseException):
                raise change
            out.write(describe_leader(change[0]) + "\n")
            out.flush()


def _elect(options: argparse.Namespace) -> int:
    from tenure.cli.run import run

    return run(run_options(options, leader_value=options.value))
