"""``tenure run NAME -- CMD``: hold a lock, renewed by the watchdog, while a command runs.

How it is built, and why:
- Signals are taken synchronously by the main thread (``tenure.cli.signals``: blocked and
  taken with ``sigtimedwait`` where it exists, else a wake-up pipe): nothing is interrupted
  half-way, and the main loop alone decides what to do with each one.
- The wait for the lock is made of short acquire attempts with a look at the signals between
  them. An attempt the server fails to answer in time (a stall), or once it has answered a
  timeout or a dropped connection, is retried until the user's deadline: only ``-w`` ends
  the wait, as ``acquire(timeout=...)`` does in Python (``tenure.cli.failures``). A server
  unreachable from the start, or an error no retry can cure (a refused password), ends it
  at once.
- CMD is started with ``posix_spawnp`` with an empty signal mask and default dispositions, so
  it sees signals exactly as if the shell had started it.
- Signals the kernel generated from the terminal (Ctrl-C, Ctrl-\\) already reach CMD, which
  shares tenure's process group: they are not sent a second time. Signals sent to tenure with
  kill(2) are forwarded to CMD.
- A lost lease (renewal refused, lock broken, server unreachable until the lease ran out) means
  CMD is no longer protected: it gets SIGTERM at once, SIGKILL after the grace period, and
  tenure exits with the lost status whatever CMD's own status was.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from typing import TextIO

import tenure
from tenure._sync.lease import Lease
from tenure._types import LockInfo
from tenure.cli import (
    EXIT_CANNOT_EXECUTE,
    EXIT_NOT_FOUND,
    EXIT_SIGNAL_BASE,
    EXIT_UNAVAILABLE,
    CommandError,
)
from tenure.cli.failures import curable, describe_failure, one_line
from tenure.cli.inspect import describe_holder, semaphore_busy
from tenure.cli.options import RunOptions
from tenure.cli.progress import QUIET, WaitReport
from tenure.cli.signals import Arrival, SignalInbox, inbox

__all__ = ["ABORTING", "FORWARDED", "run", "should_forward"]

FORWARDED = frozenset(
    {signal.SIGHUP, signal.SIGINT, signal.SIGQUIT, signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2}
)
"""Forwarded to CMD while it runs."""
ABORTING = frozenset({signal.SIGHUP, signal.SIGINT, signal.SIGQUIT, signal.SIGTERM})
"""While waiting for the lock (no CMD yet), these make tenure give up and run nothing."""
RESET_IN_CHILD = FORWARDED | {signal.SIGPIPE, signal.SIGXFSZ}
"""Python ignores SIGPIPE and SIGXFSZ; CMD gets the defaults, as from a shell."""
TICK = 0.05
"""How often the supervisor looks at the lease while CMD runs, in seconds."""
WAIT_SLICE = 0.25
"""Longest acquire attempt between two looks at pending signals while waiting for the lock."""
RETRY_PAUSES = (0.05, 0.1, 0.2, 0.5, 1.0)
"""Pauses before the attempts that follow a failed one (the last repeats): a server that
refuses connections is not hammered, one that comes back is found within a second."""


class _Interrupted(Exception):
    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def run(options: RunOptions, err: TextIO = sys.stderr) -> int:
    """Acquire, run CMD, release; the exit status is documented in docs/cli.md."""
    with inbox({*FORWARDED, signal.SIGCHLD}) as signals:
        return _run(options, signals, err)


def _run(options: RunOptions, signals: SignalInbox, err: TextIO) -> int:
    locks = tenure.connect(options.url)
    try:
        lock: Lease
        if options.leader_value is not None:
            lock = locks.election(options.name, options.ttl).candidate(options.leader_value)
        elif options.semaphore is None:
            lock = locks.lock(
                options.name, options.ttl, renew=True, hold_at_least=options.hold_at_least
            )
        else:
            lock = locks.semaphore(options.name, options.semaphore, options.ttl, renew=True,
                                   weight=options.weight)
        try:
            acquired = _acquire(lock, locks, options, signals, err)
        except _Interrupted as stop:
            _say(err, f"{_signame(stop.signum)} while waiting for {options.name!r}; "
                      "nothing was run")
            return EXIT_SIGNAL_BASE + stop.signum
        if not acquired:
            if options.verbosity > QUIET:
                _say(err, _busy_message(locks, options))
            return options.busy_exit_code
        return _hold_and_run(lock, options, signals, err)
    finally:
        locks.close()


def _acquire(
    lock: Lease, locks: tenure.Locks, options: RunOptions, signals: SignalInbox, err: TextIO
) -> bool:
    # The first try counts toward -w: with a timeout it is bounded like every later one (a
    # server that never answers costs the timeout, not the driver's own, longer ones).
    began = time.monotonic()
    failure: tenure.BackendError | None = None
    try:
        if lock.acquire(blocking=False) if options.timeout is None else lock.acquire(timeout=0):
            return True
    except tenure.BackendError as exc:
        if options.no_wait or not curable(exc, answered=False):
            raise
        failure = exc
    if options.no_wait:
        return False
    kind = "lock" if options.semaphore is None else "semaphore"
    report = WaitReport(
        options.name,
        verbosity=options.verbosity,
        timeout=options.timeout,
        look=lambda: _look(locks, options.name, kind),
        err=err,
    )
    report.started()
    try:
        acquired = _wait(lock, options, signals, report, began, failure=failure, err=err)
    except BaseException:
        report.gave_up()
        raise
    if acquired:
        report.acquired(lock.fence)
    else:
        report.gave_up()
    return acquired


def _wait(
    lock: Lease, options: RunOptions, signals: SignalInbox, report: WaitReport, began: float,
    *, failure: tenure.BackendError | None, err: TextIO,
) -> bool:
    """Try in slices until acquired or the user's deadline; a failed try is retried after a
    pause (``RETRY_PAUSES``), so a stalled or restarting server is waited out."""
    deadline = None if options.timeout is None else began + options.timeout
    answered = failure is None  # the first try got an answer: the server was reachable
    failures = 0
    failing_since: float | None = None
    while True:
        pause = 0.0
        if failure is not None:
            if failing_since is None:
                failing_since = time.monotonic()
                if options.verbosity > QUIET:
                    report.gave_up()  # the live line, if any, makes way for this one
                    _say(err, f"{describe_failure(failure)}; retrying "
                              + ("until interrupted" if deadline is None
                                 else f"for up to {options.timeout:g} s (-w)"))
            pause = RETRY_PAUSES[min(failures, len(RETRY_PAUSES) - 1)]
            failures += 1
        elif failing_since is not None:
            failing_since = None
            failures = 0
            if options.verbosity > QUIET:
                _say(err, f"the backend answers again; still waiting for {options.name!r}")
        now = time.monotonic()
        if deadline is not None:
            pause = min(pause, max(deadline - now, 0.0))
        # Signals are taken between attempts: an attempt can't be interrupted half-way.
        for arrival in signals.take(pause):
            if arrival.signum in ABORTING:
                raise _Interrupted(arrival.signum)
        now = time.monotonic()
        if deadline is not None and now >= deadline:
            if failure is not None and failing_since is not None:
                raise CommandError(
                    f"the backend kept failing while waiting for {options.name!r}, from "
                    f"{failing_since - began:.1f} s until the {options.timeout:g} s wait (-w) "
                    f"ran out: {describe_failure(failure)}",
                    EXIT_UNAVAILABLE,
                )
            return False
        report.tick()
        wait = WAIT_SLICE if deadline is None else min(WAIT_SLICE, deadline - now)
        try:
            if lock.acquire(timeout=wait):
                return True
            failure = None
            answered = True
        except tenure.BackendError as exc:
            if not curable(exc, answered=answered):
                raise
            failure = exc


def _look(locks: tenure.Locks, name: str, kind: str) -> LockInfo | None:
    """Who holds ``name``, for the wait report; a failing look only makes the report vaguer."""
    try:
        return locks.inspect(name, kind=kind)
    except tenure.TenureError:
        return None


def _hold_and_run(lock: Lease, options: RunOptions, signals: SignalInbox, err: TextIO) -> int:
    env = dict(os.environ)
    env["TENURE_LOCK_NAME"] = options.name
    env["TENURE_FENCE"] = str(lock.fence)
    lost_reason: str | None = None
    try:
        try:
            child = os.posix_spawnp(
                options.command[0],
                list(options.command),
                env,
                setsigmask=(),
                setsigdef=RESET_IN_CHILD,
            )
        except FileNotFoundError:
            raise CommandError(
                f"cannot run {options.command[0]!r}: command not found", EXIT_NOT_FOUND
            ) from None
        except OSError as exc:
            raise CommandError(
                f"cannot run {options.command[0]!r}: {exc.strerror}", EXIT_CANNOT_EXECUTE
            ) from None
        status, lost_reason = _supervise(child, lock, options, signals, err)
    finally:
        lost_reason = _release(lock, lost_reason, err)
    if lost_reason is not None:
        _say(err, f"exiting {options.lost_exit_code} because the lease on {options.name!r} "
                  f"was lost; the command's own exit status was {status}")
        return options.lost_exit_code
    return status


def _supervise(
    child: int, lock: Lease, options: RunOptions, signals: SignalInbox, err: TextIO
) -> tuple[int, str | None]:
    """Wait for CMD, forwarding signals and watching the lease; (exit status, lost reason)."""
    lost_reason: str | None = None
    kill_at: float | None = None
    while True:
        for arrival in signals.take(TICK):
            if should_forward(arrival):
                _signal_child(child, arrival.signum)
        pid, wait_status = os.waitpid(child, os.WNOHANG)
        if pid == child:
            code = os.waitstatus_to_exitcode(wait_status)
            return (code if code >= 0 else EXIT_SIGNAL_BASE - code), lost_reason
        if lost_reason is None:
            try:
                lock.check()
            except tenure.LockLost as exc:
                lost_reason = _reason(exc)
                _say(err, f"lost the lease on {options.name!r} while the command ran: "
                          f"{lost_reason}. The command is no longer protected: SIGTERM to "
                          f"pid {child} now, SIGKILL in {options.grace:g} s")
                _signal_child(child, signal.SIGTERM)
                kill_at = time.monotonic() + options.grace
        if kill_at is not None and time.monotonic() >= kill_at:
            _say(err, f"pid {child} still running {options.grace:g} s after SIGTERM: SIGKILL")
            _signal_child(child, signal.SIGKILL)
            kill_at = None


def should_forward(arrival: Arrival) -> bool:
    """Whether a signal tenure took goes on to CMD: not SIGCHLD (CMD's own news), and not one
    the terminal raised for the whole foreground process group, CMD included (it would get
    Ctrl-C twice)."""
    return arrival.signum in FORWARDED and not arrival.from_terminal


def _release(lock: Lease, lost_reason: str | None, err: TextIO) -> str | None:
    """Release; a lease found gone at release time also counts as lost (CMD may have run
    part of its course unprotected)."""
    try:
        lock.release()
    except tenure.LockLost as exc:
        if lost_reason is None:
            lost_reason = _reason(exc)
            _say(err, f"the lease on {lock.name!r} was gone when the command ended: "
                      f"{lost_reason}")
    except tenure.BackendError as exc:
        _say(err, f"could not release {lock.name!r} ({one_line(exc)}); it expires on its "
                  f"own within {lock.ttl:g} s")
    return lost_reason


def _busy_message(locks: tenure.Locks, options: RunOptions) -> str:
    if options.no_wait:
        head = f"{options.name!r} is held"
    else:
        head = f"{options.name!r} was not acquired within {options.timeout:g} s"
    if options.semaphore is not None:
        head = head.replace(f"{options.name!r}", f"a permit of {options.name!r}", 1)
    elif options.leader_value is not None:
        head = head.replace(f"{options.name!r}", f"leadership of {options.name!r}", 1)
    try:
        info = locks.inspect(
            options.name, kind="lock" if options.semaphore is None else "semaphore"
        )
    except tenure.TenureError:
        info = None
    if info is not None and info.kind == "semaphore" and info.leases:
        head += f" ({semaphore_busy(info)})"
    elif info is not None and info.holder is not None:
        left = "" if info.ttl_left is None else f", lease {info.ttl_left:.1f} s left"
        head += f" (held by {describe_holder(info)}, fence {info.fence}{left})"
    return f"{head}; not running {options.command[0]!r}"


def _signal_child(child: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):  # reaped already: nothing to tell
        os.kill(child, signum)


def _reason(exc: tenure.LockError) -> str:
    # LockError's message ends with "(lock 'name')": the callers name the lock themselves.
    text = one_line(exc)
    suffix = f" (lock {exc.name!r})"
    return text.removesuffix(suffix)


def _signame(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def _say(err: TextIO, message: str) -> None:
    err.write(f"tenure: {message}\n")
    err.flush()
