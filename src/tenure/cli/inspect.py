"""``tenure ls``, ``tenure show``, ``tenure break``: the operator's views of the lock table."""

from __future__ import annotations

import datetime
import json
from typing import Any, TextIO

import tenure
from tenure._types import LockInfo
from tenure.cli import EXIT_NOTHING, EXIT_OK

__all__ = ["break_lock", "describe_holder", "info_to_json", "list_locks", "show_lock"]


def list_locks(
    locks: tenure.Locks, prefix: str, *, include_free: bool, as_json: bool, out: TextIO
) -> int:
    """Print the held locks whose names start with ``prefix`` (all known ones with
    ``include_free``) as a table, or as a JSON array. Always exits 0, even when none."""
    infos = [info for info in locks.list_locks(prefix) if include_free or info.held]
    if as_json:
        json.dump([info_to_json(info) for info in infos], out, indent=2)
        out.write("\n")
        return EXIT_OK
    header = ["NAME", "HOLDER", "THREAD", "SINCE (UTC)", "FENCE", "TTL LEFT"]
    rows = [_row(info) for info in infos]
    if not rows:
        what = "known" if include_free else "held"
        where = f" with prefix {_printable(prefix)}" if prefix else ""
        out.write(f"no {what} locks{where}\n")
        return EXIT_OK
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        cells = [cell.rjust(width) if i >= 4 else cell.ljust(width)
                 for i, (cell, width) in enumerate(zip(row, widths, strict=True))]
        out.write("  ".join(cells).rstrip() + "\n")
    return EXIT_OK


def show_lock(locks: tenure.Locks, name: str, *, as_json: bool, out: TextIO) -> int:
    """Print one lock; exit 1 (printing ``null`` with --json) if the backend never saw it."""
    info = locks.inspect(name)
    if as_json:
        json.dump(None if info is None else info_to_json(info), out, indent=2)
        out.write("\n")
        return EXIT_NOTHING if info is None else EXIT_OK
    if info is None:
        out.write(f"{_printable(name)}: no such lock (never acquired on this backend)\n")
        return EXIT_NOTHING
    fields = [("name", _printable(info.name)), ("state", "held" if info.held else "free")]
    if info.holder is not None:
        fields += [
            ("holder", describe_holder(info)),
            ("thread", _printable(info.holder.thread)),
            ("since", _since(info.acquired_at)),
            ("ttl left", _ttl(info.ttl_left)),
        ]
    fields.append(("fence", f"{info.fence} (the last one issued)"))
    width = max(len(key) for key, _ in fields) + 1
    for key, value in fields:
        out.write(f"{(key + ':').ljust(width)} {value}\n")
    return EXIT_OK


def break_lock(locks: tenure.Locks, name: str, *, out: TextIO) -> int:
    """Force-release ``name``: exit 0 if a live lease was broken, 1 if nothing was held."""
    # Read first only to say whose lease it was; the break itself is one atomic step.
    before = locks.inspect(name)
    if locks.break_lock(name):
        whose = ""
        if before is not None and before.holder is not None:
            whose = f" held by {describe_holder(before)} (fence {before.fence})"
        out.write(
            f"broke {_printable(name)}: the lease{whose} is gone; its holder learns this at "
            "its next renewal, check or release\n"
        )
        return EXIT_OK
    out.write(f"{_printable(name)} was not held: nothing to break\n")
    return EXIT_NOTHING


def describe_holder(info: LockInfo) -> str:
    """``host:pid``, or ``-`` when free."""
    if info.holder is None:
        return "-"
    return f"{_printable(info.holder.host)}:{info.holder.pid}"


def info_to_json(info: LockInfo) -> dict[str, Any]:
    holder = info.holder
    return {
        "name": info.name,
        "held": info.held,
        "fence": info.fence,
        "holder": None if holder is None else {
            "host": holder.host, "pid": holder.pid, "thread": holder.thread,
        },
        "acquired_at": None if info.acquired_at is None else info.acquired_at.isoformat(),
        "ttl_left": None if info.ttl_left is None else round(info.ttl_left, 3),
    }


def _row(info: LockInfo) -> list[str]:
    if info.holder is None:
        return [_printable(info.name), "(free)", "-", "-", str(info.fence), "-"]
    return [
        _printable(info.name),
        describe_holder(info),
        _printable(info.holder.thread),
        _since(info.acquired_at),
        str(info.fence),
        _ttl(info.ttl_left),
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
