"""Rule 8: a child process after fork() holds none of its parent's locks.

Lock handles that hold something register here; in a forked child each is told to forget
its holds (the child's copy must not release or renew the parent's lease). The renewal
scheduler is per process already (``sync_io.scope`` changes in the child), and drivers
reconnect by pid.
"""

from __future__ import annotations

import os
import weakref
from typing import Protocol

__all__ = ["ForkAware", "track"]


class ForkAware(Protocol):
    def _forget_after_fork(self) -> None: ...


_holding: weakref.WeakSet[ForkAware] = weakref.WeakSet()


def track(handle: ForkAware) -> None:
    _holding.add(handle)


def _forget_all() -> None:
    for handle in list(_holding):
        handle._forget_after_fork()
    _holding.clear()


os.register_at_fork(after_in_child=_forget_all)
