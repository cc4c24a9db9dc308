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
import time
from typing import Any

from tenure._types import Busy, Holder
from tenure.backends.redis._config import RedisSettings

__all__ = ["BLOCKING_TIMER", "CONTENDED_FOR", "SHORTEST_WAIT", "Contention", "LockWaiter",
           "WaitBudget", "waiter_of"]

SHORTEST_WAIT = 0.0005
"""Shorter pauses just sleep: Redis's blocking timeouts count whole milliseconds (a pause is
rounded to at least 1 ms; 0 would mean forever)."""
BLOCKING_TIMER = 0.2
"""Seconds a blocking command may outlast its timeout: Redis ends timed-out ones on its timer
(every 1/hz s, 0.1 s by default). A wait plus this must stay within the socket timeout."""


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


CONTENDED_FOR = 1.0
"""Seconds after a refusal during which this client expects the name's next try to be
refused too (``Contention``)."""


class Contention:
    """The names this client found held lately: their next blocking acquire tries and waits
    in one round trip (``LockSteps.acquire_or_wait``). A hint only: a wrong guess costs a
    few commands, never a wait (a grant ends the wait at once)."""

    LIMIT = 1024
    """Names remembered; past that the memory starts over (a missed hint costs one round
    trip)."""

    def __init__(self) -> None:
        self._seen: dict[str, float] = {}

    def saw(self, name: str) -> None:
        if len(self._seen) >= self.LIMIT:
            self._seen = {}
        self._seen[name] = time.monotonic()

    def recently(self, name: str) -> bool:
        seen = self._seen.get(name)
        return seen is not None and time.monotonic() - seen < CONTENDED_FOR


@dataclasses.dataclass(eq=False)
class LockWaiter:
    """The state of one acquire attempt that found ``name`` busy, carried in its Busy answers:
    the lock logic hands that Busy to ``wait_for_release`` next, then to ``acquire`` again
    with the same token.

    The wait pipelines that next acquire behind its BLPOP and keeps the reply in ``outcome``
    for the lock logic's call to pick up without another round trip. That acquire takes a
    lease of exactly the ttl, from the moment the server grants it, which is after the wait
    was sent (``outcome_sent_at``): the Grant handed over carries its age since that send, and
    the lock logic counts the lease from then (early, never late).
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
    """When (``time.monotonic()``) the wait that brought ``outcome`` was sent."""


def waiter_of(backend: object, busy: Busy | None, name: str) -> LockWaiter | None:
    """The waiting state of this attempt, from the Busy this backend answered it last."""
    waiter = None if busy is None else busy.waiting
    if isinstance(waiter, LockWaiter) and waiter.backend is backend and waiter.name == name:
        return waiter
    return None
