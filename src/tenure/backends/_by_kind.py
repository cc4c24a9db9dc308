"""The narrow verbs of a blocking store whose kinds each have their own steps (SQLite's and
MySQL's ``locks``, ``permits``, ``queues``): the kind, which arrives as data, picks the
steps. Flavour-free, shared by both flavours."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from tenure._types import Kind, LockInfo, Renewal

__all__ = ["ByKind", "KindSteps"]

# Read once: an enum member read from its class is slow on Python 3.11 (70 ns), and every
# verb but acquire dispatches on the kind.
_SEMAPHORE, _RWLOCK = Kind.SEMAPHORE, Kind.RWLOCK


class KindSteps(Protocol):
    """One kind's steps on the store (its acquire takes what that kind needs)."""

    def release(self, name: str, token: str) -> bool: ...
    def extend_many(self, renewals: Sequence[Renewal]) -> list[bool]: ...
    def owned(self, name: str, token: str) -> bool: ...
    def inspect(self, name: str) -> LockInfo | None: ...
    def list_records(self, prefix: str) -> list[LockInfo]: ...
    def break_leases(self, name: str) -> bool: ...


class ByKind:
    """The verbs but ``acquire`` and ``set_value``, each handed to its kind's steps."""

    locks: KindSteps
    permits: KindSteps
    queues: KindSteps

    def steps(self, kind: Kind) -> KindSteps:
        if kind is _SEMAPHORE:
            return self.permits
        if kind is _RWLOCK:
            return self.queues
        return self.locks

    def release(self, kind: Kind, name: str, token: str) -> bool:
        return self.steps(kind).release(name, token)

    def extend_many(self, renewals: Sequence[Renewal]) -> list[bool]:
        """Each kind's renewals as one batch of its steps, the answers in the order asked."""
        kinds = {renewal.kind for renewal in renewals}
        if len(kinds) <= 1:
            kind = Kind(renewals[0].kind) if renewals else Kind.LOCK
            return self.steps(kind).extend_many(renewals)
        answers: dict[int, bool] = {}
        for kind in kinds:
            indexes = [i for i, r in enumerate(renewals) if r.kind == kind]
            batch = self.steps(kind).extend_many([renewals[i] for i in indexes])
            answers.update(zip(indexes, batch, strict=True))
        return [answers[i] for i in range(len(renewals))]

    def owned(self, kind: Kind, name: str, token: str) -> bool:
        return self.steps(kind).owned(name, token)

    def inspect(self, kind: Kind, name: str) -> LockInfo | None:
        return self.steps(kind).inspect(name)

    def list_records(self, kind: Kind, prefix: str) -> list[LockInfo]:
        return self.steps(kind).list_records(prefix)

    def break_leases(self, kind: Kind, name: str) -> bool:
        return self.steps(kind).break_leases(name)
