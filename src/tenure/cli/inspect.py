"""``tenure ls``, ``tenure show``, ``tenure break``: the operator's views of every primitive:
locks (one holder), semaphores (up to ``limit`` holders, one row per permit) and read-write
locks (readers or one writer, one row per lease, and the queue length; ``show`` lists the
waiters too, in arrival order), shown as fair locks while only fair locks hold or wait in the
queue the two share."""

from __future__ import annotations

import datetime
import json
import pathlib
import shlex
import unicodedata
import urllib.parse
from typing import Any, TextIO

import tenure
from tenure._types import LeaseInfo, LockInfo, WaiterInfo
from tenure._urls import resolve_url, scheme_of
from tenure.cli import EXIT_NOTHING, EXIT_OK

__all__ = [
    "absent_store",
    "break_lock",
    "describe_holder",
    "describe_lease",
    "info_to_json",
    "list_locks",
    "permits_state",
    "semaphore_busy",
    "show_lock",
]

QUEUED = ("rwlock", "fair")
"""The kinds of the one record read-write and fair locks share (``LockInfo.kind``)."""


def absent_store(url: str | None) -> pathlib.Path | None:
    """The SQLite file ``url`` (default: ``$TENURE_URL``, else the per-user file) names, if it
    does not exist: a command that only reads then says so, and creates nothing (connecting
    would create the file, its directories, even a missing home). None for other URLs."""
    resolved = resolve_url(url)
    if scheme_of(resolved) != "sqlite":
        return None
    parts = urllib.parse.urlsplit(resolved)
    raw_path = urllib.parse.unquote(parts.path[1:] if parts.path.startswith("/") else "")
    if parts.netloc or not raw_path:
        return None  # a bad URL: connecting reports it
    path = pathlib.Path(raw_path)
    return None if path.exists() else path


def say_absent(
    path: pathlib.Path, *, as_json: bool, empty: str, out: TextIO, name: str | None = None
) -> None:
    """What a read of a store that does not exist prints: ``empty`` in JSON, else one line
    (about ``name`` if given)."""
    if as_json:
        out.write(empty + "\n")
        return
    what = "nothing is locked" if name is None else f"{_printable(name)}: nothing held"
    out.write(f"{what}: the SQLite store {path} does not exist (yet)\n")


def list_locks(
    locks: tenure.Locks, prefix: str, *, include_free: bool, as_json: bool, out: TextIO,
    names_only: bool = False,
) -> int:
    """Print the held locks whose names start with ``prefix`` (all known ones with
    ``include_free``) as a table, or as a JSON array, or only their names (one a line, each
    once, as they are). Always exits 0, even when none."""
    # A read-write lock with waiters and, for a moment, no holder is still of interest.
    known = locks.list_locks(prefix)
    infos = [info for info in known if include_free or info.held or info.queued]
    if names_only:
        for name in dict.fromkeys(info.name for info in infos):
            out.write(name + "\n")
        return EXIT_OK
    if as_json:
        json.dump([info_to_json(info) for info in infos], out, indent=2)
        out.write("\n")
        return EXIT_OK
    header = ["NAME", "KIND", "HOLDER", "THREAD", "SINCE (UTC)", "FENCE", "TTL LEFT"]
    rows = [row for info in infos for row in _rows(info)]
    if not rows:
        what = "known" if include_free else "held"
        where = f" with prefix {_printable(prefix)}" if prefix else ""
        # list_locks() answers free names too: say they exist, so the two never seem to
        # disagree (`ls` shows what is held; --all, every name the backend remembers).
        free = 0 if include_free else len({info.name for info in known})
        plural = "s" if free > 1 else ""
        hint = f" ({free} free name{plural} known: tenure ls --all)" if free else ""
        out.write(f"no {what} locks or semaphores{where}{hint}\n")
        return EXIT_OK
    widths = [max(_width(row[i]) for row in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        cells = [_pad(cell, width, right=i >= 5)
                 for i, (cell, width) in enumerate(zip(row, widths, strict=True))]
        out.write("  ".join(cells).rstrip() + "\n")
    return EXIT_OK


def _width(text: str) -> int:
    """Columns ``text`` takes on a terminal: wide characters (emoji, CJK) take two,
    combining marks and zero-width joiners none."""
    columns = 0
    for character in text:
        if unicodedata.combining(character) or unicodedata.category(character) in ("Mn", "Cf"):
            continue
        columns += 2 if unicodedata.east_asian_width(character) in ("W", "F") else 1
    return columns


def _pad(cell: str, width: int, *, right: bool) -> str:
    space = " " * (width - _width(cell))
    return space + cell if right else cell + space


def show_lock(locks: tenure.Locks, name: str, *, as_json: bool, out: TextIO) -> int:
    """Print the lock, the semaphore and the read-write (or fair) lock called ``name``
    (whichever exist); exit 1 (printing ``null`` with --json) if the backend never saw any.
    With --json: one object, or an array when several exist."""
    infos = [info for info in _records(locks, name) if info is not None]
    if as_json:
        shown: Any = [info_to_json(info) for info in infos]
        json.dump(shown[0] if len(shown) == 1 else (shown or None), out, indent=2)
        out.write("\n")
        return EXIT_OK if infos else EXIT_NOTHING
    if not infos:
        out.write(f"{_printable(name)}: no such lock or semaphore (never acquired on this "
                  "backend)\n")
        return EXIT_NOTHING
    for index, info in enumerate(infos):
        if index:
            out.write("\n")
        _show_one(info, out)
    return EXIT_OK


def _records(locks: tenure.Locks, name: str) -> list[LockInfo | None]:
    found = [locks.inspect(name)]
    if locks.supports("semaphore"):
        found.append(locks.inspect(name, kind="semaphore"))
    if locks.supports("rwlock") or locks.supports("fair"):
        found.append(locks.inspect(name, kind="rwlock"))
    return found


def _show_one(info: LockInfo, out: TextIO) -> None:
    fields = [("name", _printable(info.name)), ("kind", info.kind)]
    if info.kind == "semaphore":
        fields += [
            ("limit", "-" if info.limit is None else str(info.limit)),
            ("state", permits_state(info)),
            ("units", f"{info.units} of {info.limit} in use"),
        ]
        if info.queued:
            fields.append(("queued", f"{info.queued} waiting"))
        for number, lease in enumerate(info.leases, start=1):
            fields.append((
                f"permit {number}",
                f"{_printable(lease.holder.host)}:{lease.holder.pid} "
                f"thread {_printable(lease.holder.thread)}, weight {lease.weight}, "
                f"since {_since(lease.acquired_at)}, fence {lease.fence}, "
                f"ttl left {_ttl(lease.ttl_left)}",
            ))
        for number, waiter in enumerate(info.waiters, start=1):
            fields.append((f"waiter {number}", _describe_waiter(waiter)))
    elif info.kind in QUEUED:
        fields += [("state", _rwlock_state(info)), ("queued", f"{info.queued} waiting")]
        for number, lease in enumerate(info.leases, start=1):
            fields.append((
                _lease_role(info, lease, number),
                f"{_printable(lease.holder.host)}:{lease.holder.pid} "
                f"thread {_printable(lease.holder.thread)}, since {_since(lease.acquired_at)}, "
                f"fence {lease.fence}, ttl left {_ttl(lease.ttl_left)}",
            ))
        for number, waiter in enumerate(info.waiters, start=1):
            fields.append((f"waiter {number}", _describe_waiter(waiter)))
    else:
        fields.append(("state", "held" if info.held else "free"))
        if info.holder is not None:
            fields += [
                ("holder", describe_holder(info)),
                *([] if info.value is None else [("leader value", _printable(info.value))]),
                ("thread", _printable(info.holder.thread)),
                ("since", _since(info.acquired_at)),
                ("ttl left", _ttl(info.ttl_left)),
            ]
    fields.append(("fence", f"{info.fence} (the last one issued)"))
    width = max(len(key) for key, _ in fields) + 1
    for key, value in fields:
        out.write(f"{(key + ':').ljust(width)} {value}\n")


def _describe_waiter(waiter: WaiterInfo) -> str:
    """``host:pid thread T, to write, since S``: one waiter, as ``show`` lists it."""
    holder = waiter.holder
    who = "unknown (an older tenure's place)" if holder is None else (
        f"{_printable(holder.host)}:{holder.pid} thread {_printable(holder.thread)}"
    )
    wants = "" if waiter.mode is None else f", to {waiter.mode}"
    if waiter.weight is not None:
        wants += f", weight {waiter.weight}"
    return f"{who}{wants}, since {_since(waiter.since)}"


def permits_state(info: LockInfo) -> str:
    """``2 of 3 permits held``; with weighted permits ``2 permits held, 5 of 8 units``."""
    held = len(info.leases)
    if info.units == held:
        return f"{held} of {info.limit} permits held"
    return f"{held} permit{'s' if held != 1 else ''} held, {info.units} of {info.limit} units"


def _rwlock_state(info: LockInfo) -> str:
    if not info.leases:
        return "free"
    if info.kind == "fair":
        return "held"
    if any(lease.mode == "write" for lease in info.leases):
        return "held by a writer"
    readers = len(info.leases)
    return f"held by {readers} reader{'s' if readers > 1 else ''}"


def _lease_role(info: LockInfo, lease: LeaseInfo, number: int) -> str:
    """How ``show`` labels a lease of a read-write or fair lock."""
    if info.kind == "fair":
        return "holder"
    if lease.mode != "write":
        return f"reader {number}"
    return "writer (a fair lock)" if lease.fair else "writer"


def break_lock(locks: tenure.Locks, name: str, *, kind: str = "lock", out: TextIO) -> int:
    """Force-release ``name`` (every permit of a semaphore, every reader or the writer of a
    read-write lock): exit 0 if a live lease was broken, 1 if nothing was held. When nothing
    of ``kind`` was held but the name is held as another primitive, say which, and the flag
    that breaks it."""
    broke, nothing = _break_messages(locks, name, kind)
    if locks.break_lock(name, kind=kind):
        out.write(broke + "\n")
        return EXIT_OK
    out.write(nothing + "\n")
    return _held_elsewhere(locks, name, kind, out)


def _break_messages(locks: tenure.Locks, name: str, kind: str) -> tuple[str, str]:
    """What a break of ``kind`` says when it broke a live lease, and when nothing was held."""
    shown = _printable(name)
    if kind in QUEUED:
        # Read first only to name the primitive; the break itself is one atomic step.
        before = locks.inspect(name, kind=kind)
        if (before.kind if before is not None and before.held else kind) == "fair":
            return (
                f"broke fair lock {shown}: its holder is gone (it learns this at its next "
                "renewal, check or release); its queue of waiters stays",
                f"fair lock {shown} was not held: nothing to break",
            )
        return (
            f"broke read-write lock {shown}: its readers or writer are gone (they learn this "
            "at their next renewal, check or release); its queue of waiters stays",
            f"read-write lock {shown} was not held: nothing to break",
        )
    if kind == "semaphore":
        return (
            f"broke semaphore {shown}: every permit is gone; their holders learn this at "
            "their next renewal, check or release",
            f"semaphore {shown} had no live permit: nothing to break",
        )
    # Read first only to say whose lease it was; the break itself is one atomic step.
    before = locks.inspect(name)
    whose = ""
    if before is not None and before.holder is not None:
        whose = f" held by {describe_holder(before)} (fence {before.fence})"
    return (
        f"broke {shown}: the lease{whose} is gone; its holder learns this at its next "
        "renewal, check or release",
        f"lock {shown} was not held: nothing to break",
    )


BREAK_FLAGS = {
    "lock": "", "semaphore": " --semaphore", "rwlock": " --rwlock", "fair": " --fair",
}
"""The ``tenure break`` flag of each primitive."""
SHOWN_AS = {
    "lock": "a lock", "semaphore": "a semaphore", "rwlock": "a read-write lock",
    "fair": "a fair lock",
}


def _held_elsewhere(locks: tenure.Locks, name: str, kind: str, out: TextIO) -> int:
    """After a break of ``kind`` found nothing: name the other primitives that hold ``name``
    (a break never guesses: the operator asks again with the flag). Exit 1 either way."""
    for other in _other_kinds(locks, kind):
        info = locks.inspect(name, kind=other)
        if info is None or not info.holders:
            continue
        live = len(info.holders)
        held = (permits_state(info) if other == "semaphore"
                else f"{live} lease{'s' if live > 1 else ''} held")
        out.write(
            f"{_printable(name)} is held as {SHOWN_AS[info.kind]} ({held}); to break it: "
            f"tenure break {shlex.quote(name)}{BREAK_FLAGS[info.kind]}\n"
        )
    return EXIT_NOTHING


def _other_kinds(locks: tenure.Locks, kind: str) -> list[str]:
    kinds = ["lock"]
    if locks.supports("semaphore"):
        kinds.append("semaphore")
    if locks.supports("rwlock") or locks.supports("fair"):
        kinds.append("rwlock")
    return [other for other in kinds if other != kind and not {other, kind} <= set(QUEUED)]


def describe_lease(lease: LeaseInfo) -> str:
    """``host:pid fence F`` (``weight W`` after it, for a weighted permit): one permit, as a
    waiting ``tenure run`` reports it."""
    weight = "" if lease.weight == 1 else f" weight {lease.weight}"
    return f"{_printable(lease.holder.host)}:{lease.holder.pid} fence {lease.fence}{weight}"


def semaphore_busy(info: LockInfo) -> str:
    """Why a permit of ``info``'s semaphore waits: ``all N held: ...``, or with weighted or
    queued permits ``U of N units in use, Q waiting: ...``, then every permit."""
    holders = ", ".join(describe_lease(lease) for lease in info.leases)
    if info.units == len(info.leases) == info.limit and not info.queued:
        return f"all {info.limit} held: {holders}"
    waiting = f", {info.queued} waiting" if info.queued else ""
    return f"{info.units} of {info.limit} units in use{waiting}: {holders}"


def describe_holder(info: LockInfo) -> str:
    """``host:pid``, or ``-`` when free."""
    if info.holder is None:
        return "-"
    return f"{_printable(info.holder.host)}:{info.holder.pid}"


def info_to_json(info: LockInfo) -> dict[str, Any]:
    holder = info.holder
    shown = _as_json(info, holder)
    if info.kind == "semaphore":
        shown["units"] = info.units  # the units in use: the permits' weights added up
    return shown


def _as_json(info: LockInfo, holder: tenure.Holder | None) -> dict[str, Any]:
    return {
        "name": info.name,
        "kind": info.kind,
        "held": info.held,
        "fence": info.fence,
        "limit": info.limit,
        "value": info.value,
        "queued": info.queued,
        "holder": None if holder is None else {
            "host": holder.host, "pid": holder.pid, "thread": holder.thread,
        },
        "acquired_at": None if info.acquired_at is None else info.acquired_at.isoformat(),
        "ttl_left": None if info.ttl_left is None else round(info.ttl_left, 3),
        "holders": [
            {
                "host": lease.holder.host, "pid": lease.holder.pid,
                "thread": lease.holder.thread, "fence": lease.fence, "mode": lease.mode,
                "weight": lease.weight,
                "acquired_at": None if lease.acquired_at is None
                else lease.acquired_at.isoformat(),
                "ttl_left": round(lease.ttl_left, 3),
            }
            for lease in info.holders
        ],
        # In arrival order (the order they are served in); a semaphore's waiters carry their
        # weight (empty where its backend does not queue permits: no "weighted" offer).
        "waiters": [
            {
                "host": None if waiter.holder is None else waiter.holder.host,
                "pid": None if waiter.holder is None else waiter.holder.pid,
                "thread": None if waiter.holder is None else waiter.holder.thread,
                "mode": waiter.mode,
                "weight": waiter.weight,
                "since": None if waiter.since is None else waiter.since.isoformat(),
            }
            for waiter in info.waiters
        ],
    }


def _rows(info: LockInfo) -> list[list[str]]:
    """One row per live lease (a semaphore's permits, a read-write lock's readers, each),
    or one ``(free)`` row. Only queued kinds have a queue."""
    kind = "lock" if info.kind == "lock" else f"sem {info.units}/{info.limit}"
    if info.value is not None:
        # An election's leader: its lock carries the value it campaigned or proclaimed with.
        kind = f"leader {_printable(info.value)}"
    queue = f" +{info.queued} queued" if info.queued else ""
    if info.kind in QUEUED:
        kind = info.kind
    if not info.holders:
        return [[_printable(info.name), kind + queue, "(free)", "-", "-", str(info.fence), "-"]]
    return [
        [
            _printable(info.name),
            f"rwlock {lease.mode}{queue}" if info.kind == "rwlock" else kind + queue,
            f"{_printable(lease.holder.host)}:{lease.holder.pid}",
            _printable(lease.holder.thread),
            _since(lease.acquired_at),
            str(lease.fence if lease.fence is not None else info.fence),
            _ttl(lease.ttl_left),
        ]
        for lease in info.holders
    ]


def _printable(text: str) -> str:
    """Names are any text: quote the ones that would garble a terminal (tabs, escapes)."""
    return text if text.isprintable() and text.strip() == text and text else repr(text)


def _since(moment: datetime.datetime | None) -> str:
    if moment is None:
        return "-"
    return moment.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _ttl(seconds: float | None) -> str:
    return "-" if seconds is None else f"{max(seconds, 0.0):.1f}s"
