"""Cross-process wake-ups for SQLite's queued waiters: one unix datagram socket per process.

A waiting acquire holds a ``Ticket``: its place in the name's queue (a row of
``tenure_waiters``, see ``_store``) and the wake-up a release sends it. The place row records
the waiting process's doorbell address; the releaser reads the head of the queue in its release
statement and, once that committed, rings the head: a datagram carrying the waiter's token,
sent to that address (or, when the head waits in this very process, a direct call). The
kernel wakes the doorbell's thread blocked in ``recv``, which sets the waiter's signal: no
polling while a lock stays held.

A ring is only a hint. The SQLite row stays the single truth of who holds the lease: a woken
waiter still has to win its acquire statement, and a datagram that is lost (a full socket
buffer, a process of another user) costs the waiter its back-off pause, never correctness.

Sockets live in a private per-user directory (``$XDG_RUNTIME_DIR/tenure``, else
``<tmp>/tenure-<uid>``, mode 0700, checked to be ours): only the same user's processes (and
root) can ring them. Each process binds ``<pid>-<random>`` there on its first wait, removes it
at exit, and sweeps the sockets of dead processes when it binds; a releaser that finds a
socket nobody listens on (its process was SIGKILLed) removes it too. A forked child holds
nothing of its parent's doorbell: it binds its own on its first wait.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import pathlib
import secrets
import socket
import stat
import tempfile
import threading
import weakref
from typing import Protocol

__all__ = ["Doorbell", "Settable", "Ticket", "doorbell"]

MAX_ADDRESS = 100
"""Longest socket path we bind (bytes): sun_path holds 108 on Linux, 104 on macOS."""


class Settable(Protocol):
    def set(self) -> None: ...


class Ticket:
    """One waiting acquire: its token, and its place in the queue once it announced itself.

    Kept by the acquire's attempt (``AsyncSQLiteAttempt``) from one try to the next. A ring
    that arrives while no wait is under way (the waiter is between two tries) is kept, so the
    next wait returns at once instead of missing it."""

    __slots__ = ("__weakref__", "_mutex", "_rung", "_signal", "kind", "name", "placed", "token")

    def __init__(self, kind: str, name: str, token: str) -> None:
        self.kind = kind
        self.name = name
        self.token = token
        self.placed = False
        """Whether this attempt has a row in ``tenure_waiters`` (it announced a wait)."""
        self._mutex = threading.Lock()
        self._rung = False
        self._signal: Settable | None = None

    def ring(self) -> None:
        with self._mutex:
            signal = self._signal
            if signal is None:
                self._rung = True
        if signal is not None:
            signal.set()

    def attach(self, signal: Settable) -> bool:
        """Wait with ``signal`` from now on; False (and nothing attached) if a ring already
        arrived since the last wait, which the caller then consumes instead of waiting."""
        with self._mutex:
            if self._rung:
                self._rung = False
                return False
            self._signal = signal
            return True

    def detach(self) -> None:
        with self._mutex:
            self._signal = None


class Doorbell:
    """This process's wake-up socket, the tickets waiting in this process, and the socket
    rings are sent from. One per process (``doorbell()``), shared by every SQLite file."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        # Weak: a ticket whose acquire ended without leaving (an error) frees itself.
        self._tickets: weakref.WeakValueDictionary[str, Ticket] = weakref.WeakValueDictionary()
        self._mutex = threading.Lock()
        self._socket: socket.socket | None = None
        self._sender: socket.socket | None = None
        self._address: str | None = None
        self._bound = False

    # ---- waiting side ----------------------------------------------------------------------

    def register(self, ticket: Ticket) -> str | None:
        """Make ``ticket`` ringable; returns the address to store in its place (None: this
        process has no doorbell, and the waiter relies on its back-off)."""
        with self._mutex:
            self._tickets[ticket.token] = ticket
            if not self._bound:
                self._bound = True  # tried once per process, whatever the outcome
                self._bind()
            return self._address

    def unregister(self, ticket: Ticket) -> None:
        with self._mutex:
            if self._tickets.get(ticket.token) is ticket:
                del self._tickets[ticket.token]

    def forget(self, token: str) -> None:
        """The waiter ``token`` left its queue (its place removed by token, not ticket)."""
        with self._mutex:
            self._tickets.pop(token, None)

    def _bind(self) -> None:
        directory = _socket_directory()
        if directory is None:
            return
        _sweep(directory)
        path = directory / f"{self.pid}-{secrets.token_hex(4)}"
        if len(os.fsencode(path)) > MAX_ADDRESS:
            return
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        try:
            sock.bind(os.fspath(path))
        except OSError:
            sock.close()
            return
        self._socket = sock
        self._address = os.fspath(path)
        atexit.register(_remove, self.pid, self._address)
        threading.Thread(
            target=self._listen, args=(sock,), name="tenure-sqlite-doorbell", daemon=True
        ).start()

    def _listen(self, sock: socket.socket) -> None:
        while True:
            try:
                data = sock.recv(256)
            except OSError:
                return  # closed (fork clean-up, interpreter exit)
            self.ring_here(data.decode("ascii", "replace"))

    def ring_here(self, token: str) -> bool:
        """Ring a ticket of this process; False if none waits under ``token``."""
        ticket = self._tickets.get(token)
        if ticket is None:
            return False
        ticket.ring()
        return True

    # ---- releasing side --------------------------------------------------------------------

    def ring(self, token: str, address: str | None) -> bool:
        """Wake the waiter ``token`` whose doorbell is ``address``. False when its process is
        surely gone (nobody listens on its socket, or the socket is gone): the caller may then
        drop its place. True otherwise, even if the ring was lost on the way (a hint only)."""
        if self.ring_here(token):
            return True
        if not address:
            return True  # a waiter without a doorbell: its back-off finds the lock free
        sender = self._sender
        if sender is None:
            with self._mutex:
                if self._sender is None:
                    created = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
                    created.setblocking(False)
                    self._sender = created
                sender = self._sender
        try:
            sender.sendto(token.encode("ascii"), address)
        except (ConnectionRefusedError, FileNotFoundError):
            # A socket file nobody is bound to: its process died without removing it.
            with contextlib.suppress(OSError):
                os.unlink(address)
            return False
        except OSError:
            pass  # a full buffer, another user's socket: that waiter backs off instead
        return True

    def close_after_fork(self) -> None:
        """In a forked child: let go of the parent's sockets (the child's copies only)."""
        for sock in (self._socket, self._sender):
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.close()


_current: Doorbell | None = None
_current_mutex = threading.Lock()


def doorbell() -> Doorbell:
    """This process's doorbell (a forked child gets its own)."""
    global _current
    current = _current
    if current is not None and current.pid == os.getpid():
        return current
    with _current_mutex:
        if _current is None or _current.pid != os.getpid():
            _current = Doorbell()
        return _current


def _after_fork_in_child() -> None:
    global _current
    inherited, _current = _current, None
    if inherited is not None:
        inherited.close_after_fork()
    # The inherited mutex may have been held by a parent thread at the fork.
    globals()["_current_mutex"] = threading.Lock()


os.register_at_fork(after_in_child=_after_fork_in_child)


def _socket_directory() -> pathlib.Path | None:
    """The private per-user directory for doorbell sockets, or None if none can be trusted."""
    uid = os.getuid()
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    candidates = []
    if runtime and os.path.isabs(runtime):
        candidates.append(pathlib.Path(runtime) / "tenure")
    candidates.append(pathlib.Path(tempfile.gettempdir()) / f"tenure-{uid}")
    for directory in candidates:
        with contextlib.suppress(OSError):
            directory.mkdir(mode=0o700, exist_ok=True)
            status = directory.lstat()
            # Ours, a real directory, private: nobody else can plant or read sockets there.
            if (
                stat.S_ISDIR(status.st_mode)
                and status.st_uid == uid
                and status.st_mode & 0o077 == 0
            ):
                return directory
    return None


def _sweep(directory: pathlib.Path) -> None:
    """Remove the sockets of processes that died without removing theirs (SIGKILL)."""
    with contextlib.suppress(OSError):
        for entry in os.scandir(directory):
            pid_text, _, _ = entry.name.partition("-")
            if not pid_text.isdigit():
                continue
            try:
                os.kill(int(pid_text), 0)
            except ProcessLookupError:
                with contextlib.suppress(OSError):
                    os.unlink(entry.path)
            except OSError:
                pass  # alive (or not ours to judge)


def _remove(pid: int, address: str) -> None:
    if os.getpid() == pid:  # a forked child inherits atexit handlers: not its socket
        with contextlib.suppress(OSError):
            os.unlink(address)
