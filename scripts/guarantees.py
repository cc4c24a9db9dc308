#!/usr/bin/env python3
"""Print (or --write / --check) the per-backend guarantees table of docs/guarantees.md from
each backend's declared ``capabilities``: the docs can't drift from the code."""

from __future__ import annotations

import importlib
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the backend table: tests/backends.py
DOC = ROOT / "docs" / "guarantees.md"
BEGIN, END = "<!-- guarantees:begin -->", "<!-- guarantees:end -->"


def backends() -> list[tuple[str, str]]:
    """(package, its URL schemes) for every backend of the registry, in the order of the
    test suite's backend table (tests/backends.py: the order the docs introduce them in);
    a package no row tests comes last."""
    from tests.backends import BACKENDS

    from tenure._registry import builtin_backends

    order = list(dict.fromkeys(row.package for row in BACKENDS))
    packages: dict[str, tuple[str, ...]] = {}
    for entry in builtin_backends().values():
        packages[entry.package.rpartition(".")[2]] = entry.schemes
    names = sorted(packages, key=lambda name: (order.index(name) if name in order else 99, name))
    return [(name, ", ".join(f"{scheme}://" for scheme in packages[name])) for name in names]


def yes(flag: bool) -> str:
    return "yes" if flag else "**no**"


def primitives(backend: type, primitive: str) -> str:
    """Whether this backend offers ``primitive`` beyond the mutex, or refuses it (with a
    note below the table)."""
    from tenure._async.connect import store_class

    store = store_class(backend)
    if primitive in store.refusals:
        return "**no** (see below)"
    return "yes" if primitive in store.offers else "not yet"


def weighted(backend: type) -> str:
    """Whether this backend's semaphores take weighted permits (``offers`` "weighted"):
    "-" where it has no semaphores at all."""
    from tenure._async.connect import store_class

    store = store_class(backend)
    if "semaphore" not in store.offers:
        return "-"
    return primitives(backend, "weighted")


NOUNS = {
    "semaphore": "semaphores",
    "election": "elections",
    "rwlock": "read-write locks",
    "fair": "fair locks",
    "weighted": "weighted permits",
}
"""How the notes below the table name each primitive (as ``AsyncLocks`` refusals do)."""


def table() -> str:
    rows = [
        "| backend | URLs | fencing | fences survive a server restart | leases survive a "
        "server restart | waiters woken by | across hosts | survives losing one server "
        "| semaphores | weighted permits | elections | read-write locks | fair locks |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    refused = []
    for package, urls in backends():
        module = importlib.import_module(f"tenure.backends.{package}._async")
        caps = module.BACKEND.capabilities
        rows.append(
            f"| {package} | `{urls}` | {caps.fencing} | {yes(caps.fences_survive_restart)} | "
            f"{yes(caps.leases_survive_restart)} | {caps.wakeups} | {yes(caps.multi_host)} | "
            f"{yes(caps.fault_tolerant)} | {primitives(module.BACKEND, 'semaphore')} | "
            f"{weighted(module.BACKEND)} | {primitives(module.BACKEND, 'election')} | "
            f"{primitives(module.BACKEND, 'rwlock')} | {primitives(module.BACKEND, 'fair')} |"
        )
        refused += [
            f"- **{package}** has no {NOUNS[primitive]}: {reason}."
            for primitive, reason in module.BACKEND.refusals.items()
        ]
    return "\n".join(rows + (["", *refused] if refused else []))


def render(text: str) -> str:
    head, _, rest = text.partition(BEGIN)
    _, _, tail = rest.partition(END)
    return f"{head}{BEGIN}\n{table()}\n{END}{tail}"


def main(argv: list[str]) -> int:
    current = DOC.read_text()
    wanted = render(current)
    if "--check" in argv:
        if current != wanted:
            print("docs/guarantees.md is stale: run scripts/guarantees.py --write")
            return 1
        return 0
    if "--write" in argv:
        DOC.write_text(wanted)
        return 0
    print(table())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
