"""Histories as JSON lines: one object per operation, the fields of ``Operation`` (fields at
their default are left out). A first line ``{"tenure_history": 1, ...}`` carries the format
version and what the run was (url without password, clients, ttl); ``load`` skips it."""

from __future__ import annotations

import dataclasses
import json
import pathlib
from collections.abc import Iterable, Mapping
from typing import Any

from tenure._errors import InvalidArgument
from tenure.verify.history import Operation

__all__ = ["FORMAT_VERSION", "dump_lines", "load", "save"]

FORMAT_VERSION = 1
_FIELDS = {field.name: field for field in dataclasses.fields(Operation)}


def dump_lines(history: Iterable[Operation], about: Mapping[str, Any] | None = None) -> str:
    """The history as JSON-lines text (with its header line)."""
    header = {"tenure_history": FORMAT_VERSION, **(about or {})}
    lines = [json.dumps(header, sort_keys=True)]
    for operation in history:
        record = {
            name: getattr(operation, name)
            for name, field in _FIELDS.items()
            if field.default is dataclasses.MISSING or getattr(operation, name) != field.default
        }
        lines.append(json.dumps(record, sort_keys=True))
    return "\n".join(lines) + "\n"


def save(path: str | pathlib.Path, history: Iterable[Operation],
         about: Mapping[str, Any] | None = None) -> None:
    """Write ``history`` to ``path`` (replaced if it exists)."""
    pathlib.Path(path).write_text(dump_lines(history, about), encoding="utf-8")


def load(path: str | pathlib.Path) -> tuple[list[Operation], dict[str, Any]]:
    """Read a history written by ``save`` (or by hand, one object per line): the operations
    and the header's fields. Raises InvalidArgument naming the line of a malformed record."""
    operations: list[Operation] = []
    about: dict[str, Any] = {}
    text = pathlib.Path(path).read_text(encoding="utf-8")
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InvalidArgument(f"{path}:{number}: not JSON ({exc.msg})") from None
        if not isinstance(record, dict):
            raise InvalidArgument(f"{path}:{number}: expected a JSON object")
        if "tenure_history" in record:
            if record["tenure_history"] != FORMAT_VERSION:
                raise InvalidArgument(
                    f"{path}:{number}: history format {record['tenure_history']!r}, this "
                    f"tenure reads {FORMAT_VERSION}")
            about = {key: value for key, value in record.items() if key != "tenure_history"}
            continue
        unknown = sorted(set(record) - set(_FIELDS))
        if unknown:
            raise InvalidArgument(f"{path}:{number}: unknown field(s) {', '.join(unknown)}")
        if isinstance(record.get("fences"), list):
            record["fences"] = tuple(record["fences"])  # JSON has no tuples
        try:
            operation = Operation(**record)
        except TypeError as exc:
            raise InvalidArgument(f"{path}:{number}: {exc}") from None
        problems = operation.problems()
        if problems:
            raise InvalidArgument(f"{path}:{number}: {'; '.join(problems)}")
        operations.append(operation)
    return operations, about
