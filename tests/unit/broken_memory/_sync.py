"""The broken store for threads (the workload of ``tenure verify`` uses the sync API)."""

from __future__ import annotations

import itertools
from typing import Any

from tenure._types import Busy, Grant, Holder, Kind, LeaseSpec, Mode
from tenure.backends.memory._sync import MemoryBackend

__all__ = ["BACKEND", "BrokenMemoryBackend"]

_refusals = itertools.count(1)


class BrokenMemoryBackend(MemoryBackend):
    schemes = ("broken+memory",)

    def acquire(
        self, name: str, spec: LeaseSpec, token: str, ttl: float, holder: Holder
    ) -> Grant | Busy:
        outcome = super().acquire(name, spec, token, ttl, holder)
        if spec.kind is Kind.RWLOCK and not self._readers_only(name):
            return outcome  # a read-write lock's bug under test: a writer among readers
        if isinstance(outcome, Busy) and next(_refusals) % 3 == 0:
            # The bug under test: grant while held.
            self.break_leases(spec.kind, name)
            return super().acquire(name, spec, token, ttl, holder)
        return outcome

    def _readers_only(self, name: str) -> bool:
        info = self.inspect(Kind.RWLOCK, name)
        return info is not None and bool(info.leases) and all(
            lease.mode == Mode.READ for lease in info.leases)

    def describe(self) -> str:
        return "broken+memory://"

    @classmethod
    def from_url(cls, url: str, **options: Any) -> BrokenMemoryBackend:
        backend = MemoryBackend.from_url(url.replace("broken+memory", "memory", 1), **options)
        return cls(backend.server, "", backend.gc_after)


BACKEND = BrokenMemoryBackend
