"""How waiters wait: the blocking-wait budget every kind's waits share, and the names this
client found held lately (an attempt's state between its tries is ``_async.attempt``'s).

A wait blocks on a wake list (BLPOP) that a release pushes to, for at most ``max_backoff``
and half the socket timeout (the read must not time out first). At most
``wait_connections`` waits block at once, one connection each; further waiters, and waits
too short for Redis's millisecond timeouts, pause on a timer instead. A lost wake-up
therefore costs at most one bounded pause, never a hang.
"""

from __future__ import annotations

import threading
import time

from tenure.backends.redis._config import RedisSettings

__all__ = ["BLOCKING_TIMER", "CONTENDED_FOR", "SHORTEST_WAIT", "Contention", "WaitBudget"]

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
    in one round trip (``RedisAttempt.try_or_wait``). A hint only: a wrong guess costs a
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

