"""How waiters wait: the blocking-wait budget shared by locks and semaphores, and a lock
waiter's state between its attempts.

A wait blocks on a wake list (BLPOP) that a release pushes to, for at most ``max_backoff``
and half the socket timeout (the read must not time out first). At most
``wait_connections`` waits block at once, one connection each; further waiters, and waits
too short for Redis's millisecond timeouts, pause on a timer instead. A lost wake-up
therefore costs at most one bounded pause, never a hang.
"""

from __future__ import annotations

import dataclasses
import threading
from typing import Any

from tenure._types import Busy, Holder
from tenure.backends.redis._config import RedisSettings

__all__ = ["BLOCKING_TIMER", "GRANT_SLACK", "SHORTEST_WAIT", "LockWaiter", "WaitBudget",
           "waiter_of"]

SHORTEST_WAIT = 0.0005
"""Shorter pauses just sleep: Redis's blocking timeouts count whole milliseconds (a pause is
rounded to at least 1 ms; 0 would mean forever)."""
BLOCKING_TIMER = 0.2
"""Seconds a blocking command may outlast its timeout: Redis ends timed-out ones on its timer
(every 1/hz s, 0.1 s by default). A wait plus this must stay within the socket timeout."""
GRANT_SLACK = 0.02
"""Seconds added to the lease a waiter's pipelined acquire takes, beyond the wait's longest:
the lock logic measures the lease from its own next call, a moment after the reply came; the
extra keeps the server's lease the longer of the two (checked, see ``LockWaiter``)."""


class WaitBudget:
    """How long one blocking wait may last, and how many may block at once."""

    def __init__(self, settings: RedisSettings, max_backoff: float) -> None:
        # Below SHORTEST_WAIT (a socket timeout under 0.2 s) waiters back off by timer only.
        self.longest = min(max_backoff, (settings.socket_timeout - BLOCKING_TIMER) / 2)
        self._slots = threading.BoundedSemaphore(max(1, settings.wait_connections))
        self._allowed = settings.wait_connections > 0

    def take(self, seconds: float) -> bool:
        """Whether a wait of ``seconds`` may block (then ``give`` back after it); if not,
        the caller pauses on a timer."""
        return (
            seconds >= SHORTEST_WAIT and self._allowed and self._slots.acquire(blocking=False)
        )

    def give(self) -> None:
        self._slots.release()


@dataclasses.dataclass(eq=False)
class LockWaiter:
    """The state of one acquire attempt that found ``name`` busy, carried in its Busy answers:
    the lock logic hands that Busy to ``wait_for_release`` next, then to ``acquire`` again
    with the same token.

    The wait pipelines that next acquire behind its BLPOP and keeps the reply in ``outcome``
    for the lock logic's call to pick up without another round trip. The lock logic counts
    the lease from its own call, a moment after the server granted it, so the server's lease
    must not end before the lock logic's: the pipelined acquire takes a lease longer by
    ``outcome_slack``, the wait's longest (the BLPOP's timeout, and the server's timer) plus
    GRANT_SLACK. The grant came after the wait was sent (``outcome_sent_at``), so a grant
    picked up within ``outcome_slack`` of that send is conservative whenever the BLPOP
    returned; one picked up later (a process stalled) is not handed over: ``acquire`` asks
    again with the same token instead (which restarts the lease from that request, keeping
    the fence). A holder that dies at once after such a grant keeps the lock at most that
    slack (well under a second) longer than its ttl.
    """

    backend: object
    """The backend that answered Busy (a Busy handed to another one is not its state)."""
    name: str
    token: str
    ttl: float
    holder: Holder
    value: str | None = None
    """The value its grant stores with the lease (an election's campaign), if any."""
    waited: bool = False
    """Whether it has waited (its next acquire is the one pipelined behind a BLPOP)."""
    outcome: Any = None
    """ACQUIRE's reply from the end of the last wait, not yet handed to the lock logic."""
    outcome_sent_at: float = 0.0
    """When (client clock) the wait that brought ``outcome`` was sent."""
    outcome_slack: float = 0.0
    """Seconds the lease of ``outcome``'s grant, if any, outlasts the ttl."""


def waiter_of(backend: object, busy: Busy | None, name: str) -> LockWaiter | None:
    """The waiting state of this attempt, from the Busy this backend answered it last."""
    waiter = None if busy is None else busy.waiting
    if isinstance(waiter, LockWaiter) and waiter.backend is backend and waiter.name == name:
        return waiter
    return None
