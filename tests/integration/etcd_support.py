"""What the etcd tests that drive the store line directly (requests, grants at the head,
weighted permits) share, besides their store (``etcd_store``, tests/servers/etcd.py): one
holder, a lock's spec, fresh tokens and a release that lands while a waiter watches."""

from __future__ import annotations

import secrets
import threading
import time
from typing import Any

from tenure._types import Busy, Holder, Kind, LeaseSpec
from tenure.backends.etcd._sync.store import EtcdBackend

__all__ = ["HOLDER", "LOCK", "released_during_wait", "token"]

HOLDER = Holder("host", 1, "thread")
LOCK = LeaseSpec()


def token() -> str:
    return secrets.token_hex(16)


def released_during_wait(
    backend: EtcdBackend, attempt: Any, busy: Busy, holder: str, name: str
) -> None:
    """``holder`` releases while the waiter's next wait watches the key ahead."""
    watches = backend.gateway.watches
    waiting = threading.Thread(target=attempt.wait, args=(30, busy))
    waiting.start()
    deadline = time.monotonic() + 10
    while backend.gateway.watches == watches:
        assert time.monotonic() < deadline
        time.sleep(0.005)
    assert backend.release(Kind.LOCK, name, holder)
    waiting.join(30)
