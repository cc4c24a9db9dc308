"""Which backend failures a wait for the lock outlasts (``curable``), and how a failure
reads on tenure's one line of stderr (``describe_failure``, ``one_line``)."""

from __future__ import annotations

import re

import tenure

__all__ = ["curable", "describe_failure", "one_line"]

_RETRY_NAMES = ("Timeout", "Connect", "Unavailable", "Disconnect", "NoNodes", "AutoReconnect")
"""Words in a driver's error class names that mean the server is slow or out of reach."""
_FINAL_NAMES = ("Auth", "Permission", "Access", "Denied")
"""Words that mean the server answered and said no: waiting will not change its answer."""
_STALL = re.compile(r"no answer to \w+ of .* within the caller's timeout \([^)]*\) \+ [\d.]+ s")
"""The lease core's message when a call outlived its deadline: the server stalled."""


def curable(exc: tenure.BackendError, *, answered: bool) -> bool:
    """Whether a later attempt may succeed where ``exc`` failed. A stall (the server did not
    answer an attempt within its slice's deadline, which only the slicing imposes) always
    is: ``acquire(timeout=...)`` would have waited it out. A timeout or a lost connection is
    once the server has ``answered`` in this run (it went away: it may come back). At first
    contact it is not, as in Python: a wrong host or a server that is down is told at once,
    not waited on forever. Nor is a refusal (bad password, no permission, a server error):
    waiting would only hide it."""
    # The lease core's stall message first: its error chains the driver's last word (or a
    # TimeoutError) as the cause, which at first contact would read as "server down".
    if _STALL.search(str(exc)) is not None:
        return True
    error: BaseException | None = exc.__cause__
    if error is None or not answered:
        return False
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        name = type(error).__name__
        if any(word in name for word in _FINAL_NAMES):
            return False
        if isinstance(error, (TimeoutError, ConnectionError)) or any(
            word in name for word in _RETRY_NAMES
        ):
            return True
        error = error.__cause__ or error.__context__
    return False


def describe_failure(exc: tenure.BackendError) -> str:
    """One line; the slices' own deadlines, which the user never gave, are not named."""
    return _STALL.sub(lambda found: found[0].split(" within ")[0] + " in time", one_line(exc))


def one_line(exc: BaseException) -> str:
    """``exc``'s message with its line breaks and runs of white space folded to one space."""
    return " ".join(str(exc).split())
