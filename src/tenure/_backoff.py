"""Jittered exponential back-off between acquire attempts, for backends without wake-ups."""

from __future__ import annotations

import os
import random

__all__ = ["Backoff"]

_shared_rng = random.Random()
# A forked child inherits the generator's state: without a new seed every worker of a
# multiprocessing pool would draw the same "random" pauses and retry in lock-step.
os.register_at_fork(after_in_child=_shared_rng.seed)


class Backoff:
    """Pauses that double from ``initial`` up to ``maximum``, each drawn from the upper half
    of the current step ("equal jitter"): waiters started together drift apart instead of
    retrying in lock-step, yet no pause collapses to zero.

    A pause never exceeds the holder's remaining lease, so an expiry without a release is
    noticed as soon as it happens.
    """

    def __init__(
        self, maximum: float, initial: float = 0.001, rng: random.Random | None = None
    ) -> None:
        self._step = min(initial, maximum)
        self._maximum = maximum
        # The module's shared generator: seeding a new Random per acquire costs ~12 us.
        self._rng = rng or _shared_rng

    def next_pause(self, ttl_left: float | None) -> float:
        step = self._step
        self._step = min(step * 2, self._maximum)
        pause = step / 2 + self._rng.uniform(0, step / 2)
        if ttl_left is not None:
            # A hair past the holder's expiry, so the next attempt finds it expired.
            pause = min(pause, max(ttl_left, 0.0) + 0.0005)
        return pause
