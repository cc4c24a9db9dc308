"""The protected resource's half of fencing.

A lease alone cannot protect against a paused holder: a process stopped past its TTL (GC,
SIGSTOP, a migrated VM) wakes up still believing it holds the lock, while another process
already does. Every acquisition carries a fence, strictly increasing per lock name; a resource
that remembers the highest fence it has accepted and rejects lower ones turns that late write
into an error instead of silent corruption.

``FenceGuard`` does this in memory, for resources living in one process. A resource in a
database does the same in its own write, in one statement:

    UPDATE stock SET count = :count, fence = :fence WHERE id = :id AND fence <= :fence

and treats "0 rows changed" as a stale write.
"""

from __future__ import annotations

import threading

from tenure._errors import InvalidArgumentType, TenureError

__all__ = ["FenceGuard", "StaleFence"]


class StaleFence(TenureError):
    """A write carried a fence older than one the resource already accepted."""

    def __init__(self, name: str, fence: int, latest: int) -> None:
        super().__init__(f"stale fence {fence} for {name!r}: {latest} was already accepted")
        self.name = name
        self.fence = fence
        self.latest = latest


class FenceGuard:
    """Accepts a write only if its fence is at least the highest accepted so far, per name.

    Equal fences pass: one holder may write many times under one acquisition.
    Thread-safe.
    """

    def __init__(self) -> None:
        self._latest: dict[str, int] = {}
        self._mutex = threading.Lock()

    def check(self, fence: int, name: str = "") -> None:
        """Record ``fence`` for ``name`` or raise StaleFence if an older one than seen."""
        if isinstance(fence, bool) or not isinstance(fence, int):
            raise InvalidArgumentType(f"fence must be an int, not {type(fence).__name__}")
        with self._mutex:
            latest = self._latest.get(name, 0)
            if fence < latest:
                raise StaleFence(name, fence, latest)
            self._latest[name] = fence

    def accepts(self, fence: int, name: str = "") -> bool:
        """Like ``check`` but answers False instead of raising."""
        try:
            self.check(fence, name)
        except StaleFence:
            return False
        return True

    def latest(self, name: str = "") -> int:
        with self._mutex:
            return self._latest.get(name, 0)
