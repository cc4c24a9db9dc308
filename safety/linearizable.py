"""The harness's histories, checked by ``tenure verify``'s checker.

``safety.checker`` asks the harness's own questions (did two sections overlap, did a stale
write land). This module asks the user-facing one as well: is what the clients saw
explainable by ONE lease store changing hands in some order consistent with real time,
fences rising, nothing held past its ttl? Each recorded section is two or three calls:

- its acquire (sent when the worker asked, answered when ``acquire`` returned, with the
  fence);
- for a renewed lease, its last successful renewal before the section's end, as an extend
  (sent when the renewal was sent, answered at the latest by the section's end); the
  renewals before it need not be recorded, since the lease had to stay live up to it;
- its release (sent when the section ended, answered when ``release`` returned: "ok", a
  loss, or no answer when it raised BackendError). A release after the holder already knew
  its lease lost (``lost`` set by the section's end) answers LockLost whatever the server
  says (``tenure.Lock.release``): that answer is the client's, so it counts as unknown.

A refused or timed-out acquire is not recorded: it changed nothing, and leaving it out (like
a renewal left out, or an acquire that raised BackendError) only leaves the checker fewer
calls to contradict. Which scenarios are checked, and the verdict each expects, is
docs/safety-method.md's "Linearizability".
"""

from __future__ import annotations

from safety.history import History
from tenure.verify import Operation, Report, check
from tenure.verify.model import ClockAllowance

__all__ = ["certain_overlaps", "checked", "operations"]

BUDGET = 900.0
"""Seconds the search may take per run before it answers "unknown". The budget is wall-clock
time: on the shared 2-core machine under a load average of 70 the search got about 1% of a
core, and a full-profile baseline's 20,000 calls, checked in seconds on an idle machine, ran
out of 60 s ("unknown")."""

RENEWER = 1_000_000
"""Worker ``n``'s renewals are client ``RENEWER + n``: a renewal runs beside its holder's
calls, on the renewal scheduler's thread (and the recorded ones, one per section, never
overlap each other)."""


def operations(history: History, *, ttl: float, limit: int = 1,
               primitive: str | None = None) -> list[Operation]:
    """The calls behind the history's sections, as the checker reads them. ``primitive``:
    "rwlock" (each section's ``mode`` its side) or "election"; by default a lock, or a
    semaphore of ``limit`` permits."""
    clients: dict[str, int] = {}
    primitive = primitive or ("lock" if limit == 1 else "semaphore")
    rw = primitive == "rwlock"
    common = {"primitive": primitive, "limit": limit}
    found: list[Operation] = []
    for section in history.sections:
        if (section.mode is not None) != rw:
            continue  # a read-write lock's side outside an rwlock run, or the reverse
        mode = {"mode": section.mode} if rw else {}
        client = clients.setdefault(section.worker, len(clients))
        found.append(Operation(
            client=client, name=section.name, kind="acquire", invoked=section.asked / 1e9,
            completed=section.start / 1e9, outcome="ok", lease=section.key, ttl=ttl,
            fence=section.fence, **common, **mode,
        ))
        if section.renewed is not None:
            found.append(Operation(
                client=RENEWER + client, name=section.name, kind="extend",
                invoked=section.renewed / 1e9, completed=section.end / 1e9, outcome="ok",
                lease=section.key, ttl=ttl, **common, **mode,
            ))
        if section.release == "none":
            continue  # never released (killed): the lease runs out
        answered = section.released is not None and not (
            section.release == "lost" and section.lost)
        found.append(Operation(
            client=client, name=section.name, kind="release", invoked=section.end / 1e9,
            completed=section.released / 1e9 if answered and section.released is not None else None,
            outcome=("ok" if section.release == "ok" else "fail") if answered else "unknown",
            lease=section.key, **common, **mode,
            error=None if answered else (
                "BackendError" if section.release == "error" else "LockLost, known lost"),
        ))
    return found


def checked(history: History, *, ttl: float, limit: int = 1,
            primitive: str | None = None) -> Report:
    """The checker's verdict on the history's sections (see the module's text)."""
    return check(operations(history, ttl=ttl, limit=limit, primitive=primitive),
                 budget=BUDGET)


def certain_overlaps(history: History, *, ttl: float) -> int:
    """Pairs of a lock's sections that the checker must reject (``safety.linearizable``'s
    reading of them): both leases surely live at once, each from its acquire's answer to
    whichever comes first of its release's call and the earliest moment it may have run out
    (its acquire's or last renewal's send time plus the ttl, less the checker's clock
    allowance). The harness's own count, from the sections alone: where a scenario breaks
    the backend's promise, a count above 0 means the checker must find the history not
    linearizable."""
    allowance = ClockAllowance()
    live = sorted(
        (section.start / 1e9,
         min(section.end / 1e9, allowance.earliest_end(
             (section.renewed if section.renewed is not None else section.asked) / 1e9, ttl)))
        for section in history.sections if section.mode is None)
    pairs = 0
    for index, (_, until) in enumerate(live):
        for later, _later_until in live[index + 1:]:
            if later >= until:
                break
            pairs += 1
    return pairs
