"""The contended scenarios' histories, checked by ``tenure verify``'s checker.

``safety.checker`` asks the harness's own questions (did two sections overlap, did a stale
write land). This module asks the user-facing one as well: is what the clients saw
explainable by ONE lease changing hands in some order consistent with real time, fences
rising, nothing held past its ttl? Each recorded section is two calls: its acquire (sent when
the worker asked, answered when ``acquire`` returned, with the fence) and its release (sent
when the section ended, answered when ``release`` returned: "ok", a loss, or no answer when
it raised BackendError). A refused or timed-out acquire is not recorded: it changed nothing,
and leaving it out only leaves the checker fewer calls to contradict.

Only runs whose leases are never renewed are checked this way (renewals are not recorded, and
a lease renewed past its ttl would look expired to the model): the contended scenarios take
ttl 10 s and hold for milliseconds. Read-write sections are not checked: the checker's model
has locks and semaphores only.
"""

from __future__ import annotations

from safety.history import History
from tenure.verify import Operation, Report, check

__all__ = ["checked", "operations"]

BUDGET = 60.0
"""Seconds the search may take per run before it answers "unknown"."""


def operations(history: History, *, ttl: float, limit: int = 1) -> list[Operation]:
    """The calls behind the history's sections, as the checker reads them."""
    clients: dict[str, int] = {}
    primitive = "lock" if limit == 1 else "semaphore"
    found: list[Operation] = []
    for section in history.sections:
        if section.mode is not None:
            continue  # a read-write lock's side: not in the model
        client = clients.setdefault(section.worker, len(clients))
        found.append(Operation(
            client=client, name=section.name, kind="acquire", invoked=section.asked / 1e9,
            completed=section.start / 1e9, outcome="ok", lease=section.key, ttl=ttl,
            fence=section.fence, primitive=primitive, limit=limit,
        ))
        if section.release == "none":
            continue  # never released (killed): the lease runs out
        answered = section.released is not None
        found.append(Operation(
            client=client, name=section.name, kind="release", invoked=section.end / 1e9,
            completed=section.released / 1e9 if section.released is not None else None,
            outcome=("ok" if section.release == "ok" else "fail") if answered else "unknown",
            lease=section.key, primitive=primitive, limit=limit,
            error=None if answered else "BackendError",
        ))
    return found


def checked(history: History, *, ttl: float, limit: int = 1) -> Report:
    """The checker's verdict on the history's sections (see the module's text)."""
    return check(operations(history, ttl=ttl, limit=limit), budget=BUDGET)
