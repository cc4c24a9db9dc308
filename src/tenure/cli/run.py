"""``tenure run NAME -- CMD``: hold a lock, renewed by the watchdog, while a command runs.

How it is built, and why:
- Signals are blocked in every thread of this process from the start (before any thread
  exists, so the renewal thread inherits the mask) and taken synchronously with
  ``sigtimedwait`` by the main thread: nothing is interrupted half-way, and the main loop
  alone decides what to do with each one.
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
import dataclasses
import os
import signal
import sys
import time
from collections.abc import Sequence
from typing import TextIO

import tenure
from tenure._sync.lease import Lease
from tenure._types import LockInfo
from tenure.cli import (
    EXIT_CANNOT_EXECUTE,
    EXIT_NOT_FOUND,
    EXIT_SIGNAL_BASE,
    CommandError,
)
from tenure.cli.inspect import describe_holder, describe_lease
from tenure.cli.progress import QUIET, WaitReport

__all__ = ["ABORTING", "FORWARDED", "RunOptions", "run", "should_forward"]

FORWARDED = frozenset(
    {signal.SIGHUP, signal.SIGINT, signal.SIGQUIT, signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2}
)
"""Forwarded to CMD while it runs."""
ABORTING = frozenset({signal.SIGHUP, signal.SIGINT, signal.SIGQUIT, signal.SIGTERM})
"""While waiting for the lock (no CMD yet), these make tenure give up and run nothing."""
RESET_IN_CHILD = FORWARDED | {signal.SIGPIPE, signal.SIGXFSZ}
"""Python ignores SIGPIPE and SIGXFSZ; CMD gets the defaults, as from a shell."""
SI_KERNEL = 0x80
"""Linux ``si_code`` of a signal raised by the kernel (the terminal's Ctrl-C among them)."""
TICK = 0.05
"""How often the supervisor looks at the lease while CMD runs, in seconds."""
WAIT_SLICE = 0.25
"""Longest acquire attempt between two looks at pending signals while waiting for the lock."""


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
    verbosity: int = 0
    """-1 quiet (errors only), 0 default, 1 verbose: see ``tenure.cli.progress``."""
    leader_value: str | None = None
    """Campaign in the election NAME with this value instead of taking the lock NAME
    (``tenure elect``): CMD runs while this process is the leader."""


class _Interrupted(Exception):
    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def run(options: RunOptions, err: TextIO = sys.stderr) -> int:
    """Acquire, run CMD, release; the exit status is documented in docs/cli.md."""
    watched: set[int] = {*FORWARDED, signal.SIGCHLD}
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, watched)
    try:
        return _run(options, watched, err)
    finally:
        while signal.sigtimedwait(watched, 0) is not None:
            pass  # handled already, or arrived too late to matter
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def _run(options: RunOptions, watched: set[int], err: TextIO) -> int:
    locks = tenure.connect(options.url)
    try:
        lock: Lease
        if options.leader_value is not None:
            lock = locks.election(options.name, options.ttl).candidate(options.leader_value)
        elif options.semaphore is None:
            lock = locks.lock(options.name, options.ttl, renew=True)
        else:
            lock = locks.semaphore(options.name, options.semaphore, options.ttl, renew=True)
        try:
            acquired = _acquire(lock, locks, options, watched, err)
        except _Interrupted as stop:
            _say(err, f"{_signame(stop.signum)} while waiting for {options.name!r}; "
                      "nothing was run")
            return EXIT_SIGNAL_BASE + stop.signum
        if not acquired:
            if options.verbosity > QUIET:
                _say(err, _busy_message(locks, options))
            return options.busy_exit_code
        return _hold_and_run(lock, options, watched, err)
    finally:
        locks.close()


def _acquire(
    lock: Lease, locks: tenure.Locks, options: RunOptions, watched: set[int], err: TextIO
) -> bool:
    # The first try counts toward -w: with a timeout it is bounded like every later one (a
    # server that never answers costs the timeout, not the driver's own, longer ones).
    began = time.monotonic()
    first = lock.acquire(blocking=False) if options.timeout is None else lock.acquire(timeout=0)
    if first:
        return True
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
        acquired = _wait(lock, options, watched, report, began)
    except BaseException:
        report.gave_up()
        raise
    if acquired:
        report.acquired(lock.fence)
    else:
        report.gave_up()
    return acquired


def _wait(
    lock: Lease, options: RunOptions, watched: set[int], report: WaitReport, began: float
) -> bool:
    deadline = None if options.timeout is None else began + options.timeout
    while True:
        # Signals are blocked, so an acquire can't be interrupted: wait in slices and look
        # at pending signals between them.
        while (info := signal.sigtimedwait(watched, 0)) is not None:
            if info.si_signo in ABORTING:
                raise _Interrupted(info.si_signo)
        now = time.monotonic()
        if deadline is not None and now >= deadline:
            return False
        report.tick()
        wait = WAIT_SLICE if deadline is None else min(WAIT_SLICE, deadline - now)
        if lock.acquire(timeout=wait):
            return True


def _look(locks: tenure.Locks, name: str, kind: str) -> LockInfo | None:
    """Who holds ``name``, for the wait report; a failing look only makes the report vaguer."""
    try:
        return locks.inspect(name, kind=kind)
    except tenure.TenureError:
        return None


def _hold_and_run(lock: Lease, options: RunOptions, watched: set[int], err: TextIO) -> int:
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
        status, lost_reason = _supervise(child, lock, options, watched, err)
    finally:
        lost_reason = _release(lock, lost_reason, err)
    if lost_reason is not None:
        _say(err, f"exiting {options.lost_exit_code} because the lease on {options.name!r} "
                  f"was lost; the command's own exit status was {status}")
        return options.lost_exit_code
    return status


def _supervise(
    child: int, lock: Lease, options: RunOptions, watched: set[int], err: TextIO
) -> tuple[int, str | None]:
    """Wait for CMD, forwarding signals and watching the lease; (exit status, lost reason)."""
    lost_reason: str | None = None
    kill_at: float | None = None
    while True:
        info = signal.sigtimedwait(watched, TICK)
        while info is not None:
            if should_forward(info.si_signo, info.si_code):
                _signal_child(child, info.si_signo)
            info = signal.sigtimedwait(watched, 0)
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


def should_forward(signum: int, code: int) -> bool:
    """Whether a signal tenure took (number, ``si_code``) goes on to CMD: not SIGCHLD (CMD's
    own news), and not one the kernel raised from the terminal for the whole foreground
    process group, CMD included (it would get Ctrl-C twice)."""
    return signum in FORWARDED and code != SI_KERNEL


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
        _say(err, f"could not release {lock.name!r} ({_one_line(exc)}); it expires on its "
                  f"own within {lock.ttl:g} s")
    return lost_reason


def _busy_message(locks: tenure.Locks, options: RunOptions) -> str:
    if options.no_wait:
        head = f"{options.name!r} is held"
    else:
        head = f"{options.name!r} was not acquired within {options.timeout:g} s"
    if options.semaphore is not None:
        head = head.replace(f"{options.name!r}", f"a permit of {options.name!r}", 1)
    try:
        info = locks.inspect(
            options.name, kind="lock" if options.semaphore is None else "semaphore"
        )
    except tenure.TenureError:
        info = None
    if info is not None and info.kind == "semaphore" and info.leases:
        holders = ", ".join(f"{describe_lease(lease)}" for lease in info.leases)
        head += f" (all {info.limit} held: {holders})"
    elif info is not None and info.holder is not None:
        left = "" if info.ttl_left is None else f", lease {info.ttl_left:.1f} s left"
        head += f" (held by {describe_holder(info)}, fence {info.fence}{left})"
    return f"{head}; not running {options.command[0]!r}"


def _signal_child(child: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):  # reaped already: nothing to tell
        os.kill(child, signum)


def _reason(exc: tenure.LockError) -> str:
    # LockError's message ends with "(lock 'name')": the callers name the lock themselves.
    text = _one_line(exc)
    suffix = f" (lock {exc.name!r})"
    return text.removesuffix(suffix)


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())


def _signame(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def _say(err: TextIO, message: str) -> None:
    err.write(f"tenure: {message}\n")
    err.flush()
