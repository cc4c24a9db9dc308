"""``memory://``'s driver-error table: empty. The server is this process's own data under a
mutex; no step can fail the way a connection or a server does, so every error a step raises
(a limit mismatch, a bug) leaves as it is."""

from __future__ import annotations

__all__ = ["DRIVER_ERRORS"]

DRIVER_ERRORS: tuple[type[BaseException], ...] = ()
