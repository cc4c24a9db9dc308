"""tenure: distributed locks and leases with fencing tokens, one API over many backends.

    import tenure
    locks = tenure.connect()                    # $TENURE_URL, else the per-user SQLite file
    with locks.lock("orders:42", ttl=30, timeout=5) as lock:
        write(order, fence=lock.fence)

``tenure.connect_async`` returns the same API for asyncio. See the README and docs/.
"""


import importlib as _importlib
import typing as _typing

from tenure._errors import (
    BackendError,
    ConfigurationError,
    InvalidArgument,
    InvalidArgumentType,
    LockError,
    LockLost,
    LockTimeout,
    NotOwned,
    TenureError,
)
from tenure._fencing import FenceGuard, StaleFence
from tenure._sync.client import Locks
from tenure._sync.connect import connect
from tenure._sync.election import Election, Leadership
from tenure._sync.lock import Lock
from tenure._sync.rwlock import QUEUE_TTL, ReadWriteLock
from tenure._sync.semaphore import Semaphore
from tenure._types import Capabilities, Holder, Leader, LeaseInfo, LockInfo, WaiterInfo

if _typing.TYPE_CHECKING:
    from tenure._async.client import AsyncLocks
    from tenure._async.connect import connect_async
    from tenure._async.election import AsyncElection, AsyncLeadership
    from tenure._async.lock import AsyncLock
    from tenure._async.rwlock import AsyncReadWriteLock
    from tenure._async.semaphore import AsyncSemaphore

# The asyncio flavour is imported at its first use (PEP 562): a program (or a `tenure`
# command) that only uses the threads flavour does not pay for importing asyncio and the
# async modules, about half of `import tenure`.
_ASYNC = {
    "AsyncLocks": "tenure._async.client",
    "connect_async": "tenure._async.connect",
    "AsyncElection": "tenure._async.election",
    "AsyncLeadership": "tenure._async.election",
    "AsyncLock": "tenure._async.lock",
    "AsyncReadWriteLock": "tenure._async.rwlock",
    "AsyncSemaphore": "tenure._async.semaphore",
}


def __getattr__(name: str) -> _typing.Any:
    module = _ASYNC.get(name)
    if module is None:
        raise AttributeError(f"module 'tenure' has no attribute {name!r}")
    value = getattr(_importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))

# The one place the version is written: pyproject.toml reads it from here (a literal, so the
# build reads it without importing tenure).
__version__ = "0.1.0"

__all__ = [
    "AsyncElection",
    "AsyncLeadership",
    "AsyncLock",
    "AsyncLocks",
    "AsyncReadWriteLock",
    "AsyncSemaphore",
    "BackendError",
    "Capabilities",
    "ConfigurationError",
    "Election",
    "FenceGuard",
    "Holder",
    "InvalidArgument",
    "InvalidArgumentType",
    "Leader",
    "Leadership",
    "LeaseInfo",
    "Lock",
    "LockError",
    "LockInfo",
    "LockLost",
    "LockTimeout",
    "Locks",
    "NotOwned",
    "QUEUE_TTL",
    "ReadWriteLock",
    "Semaphore",
    "StaleFence",
    "TenureError",
    "WaiterInfo",
    "__version__",
    "connect",
    "connect_async",
]
