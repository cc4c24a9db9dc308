"""Check that a lease store's answers are linearizable: ``tenure verify`` and its checker.

    from tenure.verify import Operation, check
    report = check(history)             # history: Operations recorded by your clients
    report.linearizable                 # True, False (see report.violations), None (budget)

A history is a list of ``Operation`` (``tenure.verify.history`` says what each field
means), saved and loaded as JSON lines (``save``, ``load``). ``check`` splits it by name and
searches each part for an order of the calls that a fenced lease explains (the model:
``tenure.verify.model``, and for read-write locks and elections
``tenure.verify.primitives``; the search: ``tenure.verify.search``). The client side of
``tenure verify``, processes that call a store and record what happened, is
``tenure.verify.workload`` (each client: ``tenure.verify.client``). docs/verify.md is the
user's guide.
"""

from __future__ import annotations

from tenure.verify.check import DEFAULT_BUDGET, Report, Violation, check
from tenure.verify.explain import describe_violation
from tenure.verify.history import Operation
from tenure.verify.jsonl import load, save
from tenure.verify.model import ClockAllowance, LeaseModel

__all__ = [
    "DEFAULT_BUDGET",
    "ClockAllowance",
    "LeaseModel",
    "Operation",
    "Report",
    "Violation",
    "check",
    "describe_violation",
    "load",
    "save",
]
