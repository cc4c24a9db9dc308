"""The Redis backend class: the lock steps, the permit steps and the queued (read-write and
fair lock) steps over one shared state."""

from __future__ import annotations

from typing import Any

from tenure._async.capabilities import AsyncLeaseValueSupport
from tenure.backends.redis._async.locks import AsyncLockSteps
from tenure.backends.redis._async.rwlocks import AsyncQueueSteps
from tenure.backends.redis._async.semaphores import AsyncPermitSteps
from tenure.backends.redis._config import parse

__all__ = ["AsyncRedisBackend"]


class AsyncRedisBackend(
    AsyncLockSteps, AsyncPermitSteps, AsyncQueueSteps, AsyncLeaseValueSupport
):
    """Options (URL query or keyword): ``socket_timeout``, ``socket_connect_timeout`` (seconds,
    default 3), ``retries`` (redis-py connection retries, default 0), ``namespace`` (key
    prefix, default ``tenure``), ``db``, ``max_connections``, ``wait_connections`` (default
    64), ``handoff_window`` (accepted and ignored since a release hands the lock straight to
    the longest-blocked waiter), ``gc_after`` (seconds an idle semaphore's or
    read-write lock's record is kept, default 10 minutes; ``none``: forever), ``client_name``,
    ``health_check_interval``;
    keyword only: ``username``, ``password``, ``sentinel_username``, ``sentinel_password``,
    ``ssl_*`` (TLS files, ``ssl_cert_reqs``, ``ssl_check_hostname``, ``ssl_min_version``...)."""

    @classmethod
    def from_url(cls, url: str, **options: Any) -> AsyncRedisBackend:
        return cls(parse(url, options))
