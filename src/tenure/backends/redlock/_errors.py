"""Redlock's errors: each node speaks Redis, so a node's driver errors are the Redis wing's
table (``DRIVER_ERRORS``, ``misconfigured``). A node's failure is one answer among several:
the quorum decides, and only a verb that cannot reach a majority fails, with ``no_quorum``
(the one ``BackendError`` form, its cause the first node's driver error)."""

from __future__ import annotations

from collections.abc import Sequence

from tenure._async.store import failure
from tenure._errors import BackendError
from tenure.backends.redis._errors import DRIVER_ERRORS, misconfigured

__all__ = ["DRIVER_ERRORS", "NoQuorum", "misconfigured", "no_quorum"]


class NoQuorum(Exception):
    """Too few nodes answered to decide (the text of a ``no_quorum`` error's detail)."""


def no_quorum(
    where: str, action: str, subject: str, failures: Sequence[Exception], *,
    count: int, quorum: int,
) -> BackendError:
    """The error for a verb that heard from fewer than ``quorum`` of ``count`` nodes; raise
    it ``from failures[0]``."""
    answered = count - len(failures)
    return failure(where, action, subject, NoQuorum(
        f"{answered} of {count} nodes answered, a majority ({quorum}) is needed; "
        f"{failures[0]}"
    ))
