"""tenure: distributed locks and leases with fencing tokens, one API over many backends.

    import tenure
    locks = tenure.connect()                    # $TENURE_URL, else the per-user SQLite file
    with locks.lock("orders:42", ttl=30, timeout=5) as lock:
        write(order, fence=lock.fence)

``tenure.connect_async`` returns the same API for asyncio. See the README and docs/.
"""


from tenure._async.client import AsyncLocks
from tenure._async.connect import connect_async
from tenure._async.election import AsyncElection, AsyncLeadership
from tenure._async.lock import AsyncLock
from tenure._async.rwlock import QUEUE_TTL, AsyncReadWriteLock
from tenure._async.semaphore import AsyncSemaphore
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
from tenure._sync.rwlock import ReadWriteLock
from tenure._sync.semaphore import Semaphore
from tenure._types import Capabilities, Holder, Leader, LeaseInfo, LockInfo, WaiterInfo

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
