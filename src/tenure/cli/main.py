"""The ``tenure`` command line: argument parsing, dispatch, and turning errors into one line
of stderr and a documented exit status. The commands live in ``run`` (its wait reports in
``progress``), ``inspect``, ``demo``, ``completion``; the help's layout and the exit status
table every parser shares in ``parsers``."""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
from collections.abc import Callable, Sequence
from typing import TextIO

import tenure
from tenure._urls import default_sqlite_path, redact, resolve_url
from tenure._validation import validate_name
from tenure.cli import (
    EXIT_NOTHING,
    EXIT_SIGNAL_BASE,
    EXIT_SOFTWARE,
    EXIT_UNAVAILABLE,
    EXIT_USAGE,
    CommandError,
)
from tenure.cli.completion import SHELLS
from tenure.cli.election import COMMANDS as ELECTION_COMMANDS
from tenure.cli.election import add_commands as add_election_commands
from tenure.cli.logs import owned_stderr
from tenure.cli.options import add_hold_options, run_options
from tenure.cli.parsers import EXIT_STATUSES, MANUAL_URL, Formatter, Parser
from tenure.cli.progress import VERBOSE
from tenure.cli.verify import COMMANDS as VERIFY_COMMANDS
from tenure.cli.verify import add_commands as add_verify_commands

__all__ = ["build_parser", "main"]

CMD_COMMANDS = ("run", "elect")
"""Commands whose CMD follows ``--``, untouched by option parsing."""
COMMANDS = ("run", "ls", "show", "break", "demo", "completion", *ELECTION_COMMANDS,
            *VERIFY_COMMANDS)

RUN_EXAMPLES = """\
examples:
  # cron, skip if the last run is still going: silent, and a skip counts as success
  */5 * * * * tenure run sync -n -q -E 0 -- ./sync.sh
  # wait up to 10 s for the lock, showing who holds it meanwhile
  tenure run deploy -w 10 -v -- ./deploy.sh
  # at most 3 exports at once, anywhere; wait up to 10 minutes for a permit
  tenure run exports --semaphore 3 --timeout 600 -- ./export.sh
  # a nightly job fired by every node's cron: one run per night, however the clocks differ
  0 2 * * * tenure run nightly -n -q -E 0 --ttl 3600 --hold-at-least 300 -- ./report.sh

"""


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="tenure",
        description="Distributed locks with fencing tokens: run a command under a lock, look "
        "at the locks a backend holds, break one, or watch the oversold-stock demo.",
        epilog=EXIT_STATUSES + f"\nThe full manual: {MANUAL_URL}",
        formatter_class=Formatter,
    )
    parser.add_argument("--version", action="version", version=f"tenure {tenure.__version__}")
    url_help = (
        "backend URL, e.g. redis://host:6379/0 or sqlite:////abs/path.db (default: "
        f"$TENURE_URL, else the per-user SQLite file {default_sqlite_path()})"
    )
    parser.add_argument("--url", default=None, metavar="U", help=url_help)
    # --url is accepted before or after the command; given after, it wins.
    common = Parser(add_help=False)
    common.add_argument("--url", default=argparse.SUPPRESS, metavar="U", help=url_help)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    def command(
        name: str, summary: str, description: str, epilog: str = EXIT_STATUSES
    ) -> argparse.ArgumentParser:
        sub: argparse.ArgumentParser = commands.add_parser(
            name, parents=[common], help=summary, description=description,
            epilog=epilog, formatter_class=Formatter,
        )
        return sub

    run = command(
        "run",
        "run a command while holding a lock",
        "Acquire NAME (renewed in the background at ttl/3), run CMD, release, and exit with "
        "CMD's status. CMD gets TENURE_LOCK_NAME and TENURE_FENCE in its environment (pass "
        "the fence to the resource you write to). Signals sent to tenure (SIGINT, SIGTERM, "
        "SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2) are forwarded to CMD. If the lock is not obtained, "
        "nothing runs and tenure exits 75. If the lease is lost while CMD runs, CMD gets "
        "SIGTERM, then SIGKILL after --grace seconds, and tenure exits 76. The short "
        "options -n, -w, -E are flock(1)'s.",
        RUN_EXAMPLES + EXIT_STATUSES,
    )
    run.usage = "tenure run NAME [options] -- CMD [ARGS...]"
    run.add_argument("name", metavar="NAME", help="the lock's name")
    add_hold_options(
        run, "the lock", lost="the lease is lost",
        ttl="lease in seconds; a crashed tenure frees the lock after this long",
    )
    run.add_argument("--semaphore", type=int, default=None, metavar="N",
                     help="hold one of N permits of the semaphore NAME instead of the lock "
                          "NAME: at most N commands run at once (every holder uses one N)")
    run.add_argument("--weight", type=int, default=None, metavar="W",
                     help="with --semaphore: the permit takes W of the N units (1..N; "
                          "default 1): e.g. a job that needs 2 of 8 GPUs; waiters are "
                          "served in arrival order, so a heavy one is never starved")
    run.add_argument("--hold-at-least", type=float, default=None, metavar="S",
                     help="keep NAME held until S seconds after it was obtained, even when "
                          "CMD ends sooner: a job fired on several hosts a little apart "
                          "runs once per window (use with -n); default: release at once")
    run.set_defaults(handler=_run)

    ls = command(
        "ls",
        "list held locks and semaphores",
        "List the locks, semaphore permits and read-write lock leases currently held (with "
        "--all, also the free ones the backend remembers, with their last fence). KIND is "
        "'lock', 'sem H/N' for a semaphore with H of its N units in use (each permit takes its "
        "weight, 1 unless weighted; one row per permit), "
        "'rwlock read' / 'rwlock write' for a read-write lock's readers or writer (one row "
        "per lease), or 'fair' for a fair lock's holder (a name whose holder and waiters are "
        "all fair locks: one with a read-write lock's among them shows as rwlock), with "
        "'+Q queued' when Q waiters are in its queue. Times are "
        "UTC; TTL LEFT is by the server's clock.",
    )
    ls.add_argument("prefix", nargs="?", default="", metavar="PREFIX",
                    help="only names starting with PREFIX")
    ls.add_argument("--all", action="store_true", help="include free locks")
    shown = ls.add_mutually_exclusive_group()
    shown.add_argument("--json", action="store_true", help="print a JSON array")
    shown.add_argument("--names", action="store_true",
                       help="print only the names, one a line, each once (for scripts and "
                            "shell completion: names may hold spaces)")
    ls.set_defaults(handler=_ls)

    show = command("show", "show one lock",
                   "Show who holds NAME: host, pid, thread, since, TTL left, last fence; "
                   "for a semaphore NAME, its limit and every permit; for a read-write or "
                   "fair lock NAME, its readers or writer and its queue length.")
    show.add_argument("name", metavar="NAME")
    show.add_argument("--json", action="store_true", help="print a JSON object (null if unknown)")
    show.set_defaults(handler=_show)

    brk = command(
        "break",
        "force-release a lock (operators)",
        "Force-release NAME whoever holds it. The holder finds out at its next renewal, check "
        "or release; a `tenure run` holder terminates its command. Exit 0 if a live lease was "
        "broken, 1 if nothing was held.",
    )
    brk.add_argument("name", metavar="NAME")
    kinds = brk.add_mutually_exclusive_group()
    kinds.add_argument("--semaphore", action="store_true",
                       help="break every permit of the semaphore NAME instead of the lock NAME")
    kinds.add_argument("--rwlock", action="store_true",
                       help="break every reader or the writer of the read-write (or fair) lock "
                            "NAME instead of the lock NAME; its queue of waiters stays")
    kinds.add_argument("--fair", action="store_true",
                       help="break the holder of the fair lock NAME instead of the lock NAME "
                            "(the same as --rwlock: a fair lock is the write side of the "
                            "read-write lock NAME); its queue of waiters stays")
    brk.set_defaults(handler=_break)

    demo = command(
        "demo",
        "the oversold-stock demonstration",
        "Worker processes sell units from a shared stock record (read it, think, write it "
        "back), first without the lock, then holding the lock 'demo:stock' around each sale, "
        "and print both outcomes. Exit 0 if the locked run sold exactly the stock.",
    )
    demo.add_argument("--workers", type=int, default=8, metavar="N",
                      help="worker processes (default: 8)")
    demo.add_argument("--stock", type=int, default=100, metavar="N",
                      help="units in stock (default: 100)")
    demo.add_argument("--think", type=float, default=0.01, metavar="S",
                      help="seconds between reading the stock and writing it (default: 0.01)")
    demo.set_defaults(handler=_demo)

    completion = command(
        "completion",
        "print a shell completion script",
        "Print the completion script for SHELL on stdout: subcommands, options, and lock "
        "names (read with 'tenure ls --all') for NAME arguments. Install it as the manual "
        f"shows ({MANUAL_URL}), e.g. for bash: tenure completion bash > "
        "~/.local/share/bash-completion/completions/tenure",
    )
    completion.add_argument("shell", choices=SHELLS, metavar="SHELL",
                            help="one of: " + ", ".join(SHELLS))
    completion.set_defaults(handler=_completion)
    add_election_commands(command)
    add_verify_commands(command)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command in ``argv`` (default: ``sys.argv[1:]``); return the exit status."""
    arguments = list(sys.argv[1:] if argv is None else argv)
    url: str | None = None
    try:
        options = _parse(arguments)
        url = options.url
        handler: Callable[[argparse.Namespace], int] = options.handler
        verbose = getattr(options, "verbosity", 0) >= VERBOSE
        with owned_stderr(sys.stderr, verbose=verbose):
            return handler(options)
    except CommandError as exc:
        return _fail(exc.message, exc.status, url)
    except (tenure.InvalidArgument, tenure.InvalidArgumentType, tenure.ConfigurationError) as exc:
        return _fail(str(exc), EXIT_USAGE, url)
    except tenure.BackendError as exc:
        return _fail(str(exc), EXIT_UNAVAILABLE, url)
    except KeyboardInterrupt:
        return EXIT_SIGNAL_BASE + signal.SIGINT
    except BrokenPipeError:
        # `tenure ls | head`: the reader left. Point stdout at /dev/null so the interpreter's
        # final flush does not fail again.
        with contextlib.suppress(OSError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        return EXIT_SIGNAL_BASE + signal.SIGPIPE
    except Exception as exc:
        # A bug, not bad input: still one line, unless TENURE_DEBUG asks for the traceback.
        if os.environ.get("TENURE_DEBUG"):
            raise
        return _fail(
            f"internal error: {type(exc).__name__}: {exc} (set TENURE_DEBUG=1 for the "
            "traceback)",
            EXIT_SOFTWARE,
            url,
        )


def _parse(arguments: list[str]) -> argparse.Namespace:
    parser = build_parser()
    command: list[str] | None = None
    if "--" in arguments and _command_of(arguments[: arguments.index("--")]) in CMD_COMMANDS:
        # Everything after `--` is CMD, untouched: `tenure run x -- ls -la` must not read -la.
        split = arguments.index("--")
        arguments, command = arguments[:split], arguments[split + 1 :]
    options, extra = parser.parse_known_args(arguments)
    unknown = [word for word in extra if word.startswith("-") and word != "-"]
    if unknown:
        # An option argparse does not know is named as such, not taken for a misplaced CMD.
        raise CommandError(
            f"{options.command}: unknown option {unknown[0]!r} (see 'tenure "
            f"{options.command} --help')"
        )
    if options.command in CMD_COMMANDS and (extra or not command):
        shown = f"unexpected {extra[0]!r}: " if extra else ""
        raise CommandError(
            f"{options.command}: {shown}give the command after --, as in: tenure "
            f"{options.command} NAME -- CMD [ARGS...]"
        )
    if extra:
        raise CommandError(
            f"{options.command}: unexpected argument {extra[0]!r} (see 'tenure "
            f"{options.command} --help')"
        )
    options.argv = command
    return options


def _command_of(arguments: list[str]) -> str | None:
    """The subcommand word among ``arguments``, skipping options and --url's value."""
    skip = False
    for argument in arguments:
        if skip:
            skip = False
        elif argument == "--url":
            skip = True
        elif not argument.startswith("-"):
            return argument
    return None


def _fail(message: str, status: int, url: str | None) -> int:
    """Print ``message`` as one line on stderr, without any password the URL carries."""
    text = " ".join(message.split())
    for secret, shown in _secrets(url):
        text = text.replace(secret, shown)
    sys.stderr.write(f"tenure: error: {text}\n")
    sys.stderr.flush()
    return status


def _secrets(url: str | None) -> list[tuple[str, str]]:
    """The URL as written, with its redacted form: only whole URLs are replaced. Replacing
    the password wherever its characters appear would mangle the rest of the message (a
    password "1" masks every digit 1; "s3cret" masks a lock named "lock-s3cret"), and the
    backends already print URLs redacted."""
    try:
        resolved = resolve_url(url)
    except tenure.TenureError:
        return []
    return [(resolved, redact(resolved))] if redact(resolved) != resolved else []


def _connect(options: argparse.Namespace) -> tenure.Locks:
    return tenure.connect(options.url)


# ---- the commands -------------------------------------------------------------------------


def _run(options: argparse.Namespace) -> int:
    from tenure.cli.run import run

    return run(run_options(
        options, semaphore=options.semaphore, hold_at_least=options.hold_at_least,
        weight=options.weight,
    ))


def _ls(options: argparse.Namespace) -> int:
    from tenure.cli.inspect import absent_store, list_locks, say_absent

    if (absent := absent_store(options.url)) is not None:
        if not options.names:
            say_absent(absent, as_json=options.json, empty="[]", out=_out())
        return 0
    with _connect(options) as locks:
        return list_locks(
            locks, options.prefix, include_free=options.all, as_json=options.json, out=_out(),
            names_only=options.names,
        )


def _show(options: argparse.Namespace) -> int:
    from tenure.cli.inspect import absent_store, say_absent, show_lock

    name = validate_name(options.name)
    if (absent := absent_store(options.url)) is not None:
        say_absent(absent, as_json=options.json, empty="null", out=_out(), name=name)
        return EXIT_NOTHING
    with _connect(options) as locks:
        return show_lock(locks, name, as_json=options.json, out=_out())


def _break(options: argparse.Namespace) -> int:
    from tenure.cli.inspect import absent_store, break_lock, say_absent

    name = validate_name(options.name)
    if (absent := absent_store(options.url)) is not None:
        say_absent(absent, as_json=False, empty="", out=_out(), name=name)
        return EXIT_NOTHING
    with _connect(options) as locks:
        kind = ("semaphore" if options.semaphore else "rwlock" if options.rwlock
                else "fair" if options.fair else "lock")
        return break_lock(locks, name, kind=kind, out=_out())


def _demo(options: argparse.Namespace) -> int:
    from tenure.cli.demo import DemoOptions, run_demo

    if not 1 <= options.workers <= 64:
        raise CommandError(f"--workers must be 1..64, not {options.workers}")
    if not 1 <= options.stock <= 100_000:
        raise CommandError(f"--stock must be 1..100000, not {options.stock}")
    if not 0 <= options.think <= 1:
        raise CommandError(f"--think must be 0..1 seconds, not {options.think}")
    return run_demo(
        DemoOptions(
            url=options.url, workers=options.workers, stock=options.stock, think=options.think
        ),
        out=_out(),
    )


def _completion(options: argparse.Namespace) -> int:
    from tenure.cli.completion import script

    _out().write(script(options.shell, build_parser()))
    return 0


def _out() -> TextIO:
    return sys.stdout
