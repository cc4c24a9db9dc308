"""The tenure side of docs/coming-from.md: each section between ``--8<--`` markers is
included into the page (pymdownx.snippets, dedented), and tests/migration/test_examples.py
runs every function here on real servers, so the page shows code that works.

Each function takes the URL its page section names in a comment (``url``; the tests give
each run a namespace of its own in it); the page shows the section only.
"""

from __future__ import annotations

import tenure


def redis_py(url: str) -> tuple[int | None, int | None]:
    # --8<-- [start:redis-py]
    locks = tenure.connect(url)  # "redis://localhost:6379/0"

    # redis-py: lock = r.lock("report", timeout=30, blocking_timeout=5)
    lock = locks.lock("report", ttl=30, timeout=5)
    if lock.acquire():  # waits up to the handle's timeout (5 s), then False
        try:
            first = lock.fence  # hand it to the resource you write to
            lock.extend()  # the lease now ends 30 s from NOW (redis-py: extend(30) adds 30 s)
            lock.extend(60)  # ... or 60 s from now; redis-py: extend(60, replace_ttl=True)
        finally:
            lock.release()  # NotOwned / LockLost where redis-py raises LockNotOwnedError

    # The context manager raises LockTimeout when the lock is not acquired in time
    # (redis-py's raises LockError).
    with locks.lock("report", ttl=30, timeout=5) as lock:
        second = lock.fence
    # --8<-- [end:redis-py]
    locks.close()
    return first, second


def redis_py_renewal(url: str) -> bool:
    locks = tenure.connect(url)
    # --8<-- [start:redis-py-renewal]
    # Instead of a thread of your own calling lock.extend() or lock.reacquire():
    lock = locks.lock("nightly-export", ttl=10, renew=True)
    with lock:
        for _batch in range(3):
            lock.check()  # raises LockLost once the lease is gone: stop writing
            ...  # export one batch
    # --8<-- [end:redis-py-renewal]
    held = lock.owned()
    locks.close()
    return held


def python_redis_lock(url: str) -> int | None:
    # --8<-- [start:python-redis-lock]
    locks = tenure.connect(url)  # "redis://localhost:6379/0"

    # redis_lock.Lock(conn, "cache-refresh", expire=60, auto_renewal=True)
    lock = locks.lock("cache-refresh", ttl=60, renew=True)
    if lock.acquire(blocking=False):  # same signature as threading.Lock
        try:
            ...  # refresh the cache
        finally:
            lock.release()  # NotOwned where redis_lock raises NotAcquired

    # redis_lock.Lock(conn, "cache-refresh").reset(): force-release, for operators
    locks.break_lock("cache-refresh")
    # redis_lock.Lock(conn, "cache-refresh").get_owner_id(): who holds it
    info = locks.inspect("cache-refresh")  # holder (host, pid, thread), fence, ttl left
    # --8<-- [end:python-redis-lock]
    locks.close()
    return None if info is None else info.fence


def pottery(url: str) -> tuple[int | None, str]:
    # --8<-- [start:pottery]
    # Redlock over independent masters, as pottery's masters={r1, r2, r3}:
    locks = tenure.connect(url)  # "redlock://host1:6379,host2:6379,host3:6379"

    # Redlock(key="printer", masters=..., auto_release_time=10, num_extensions=3)
    lock = locks.lock("printer", ttl=10, renew=True, max_renewals=3)
    with lock:  # LockTimeout where pottery's context manager raises QuorumNotAchieved
        fence = lock.fence  # pottery has none; see the Redlock page for what it orders
        ...  # print

    # @synchronize(key="printer", masters=..., auto_release_time=10)
    @locks.locked("printer", ttl=10, timeout=5)
    def print_page() -> str:
        return "printed"

    printed = print_page()
    # --8<-- [end:pottery]
    locks.close()
    return fence, printed


def filelock(url: str) -> bool:
    # --8<-- [start:filelock]
    # filelock: FileLock("data.lock", timeout=5); tenure's default store is a SQLite file
    # per user, or name one: "sqlite:////var/lib/myapp/locks.db"
    locks = tenure.connect(url)

    lock = locks.lock("data", ttl=30, timeout=5, renew=True, reentrant=True)

    def save() -> bool:
        with lock:  # nests in the same thread, as FileLock does (reentrant=True)
            return lock.owned()  # filelock: lock.is_locked

    try:
        with lock:
            saved = save()
    except tenure.LockTimeout:  # filelock raises filelock.Timeout
        saved = False
    # --8<-- [end:filelock]
    locks.close()
    return saved


def kazoo(url: str) -> tuple[int | None, int | None]:
    # --8<-- [start:kazoo]
    locks = tenure.connect(url)  # "zookeeper://zk1:2181,zk2:2181,zk3:2181/myapp"

    # zk.Lock("/locks/report", "worker-1"); lock.acquire(timeout=5)
    lock = locks.lock("report", ttl=30, renew=True)
    if lock.acquire(timeout=5):
        try:
            fence = lock.fence  # the node's czxid: kazoo does not give you one
        finally:
            lock.release()

    # zk.Semaphore("/sem/exports", max_leases=3)
    with locks.semaphore("exports", limit=3, ttl=30, timeout=5):
        ...
    # zk.ReadLock("/rw/catalog") and zk.WriteLock("/rw/catalog")
    catalog = locks.rwlock("catalog", ttl=30)
    with catalog.read(timeout=5):
        ...
    with catalog.write(timeout=5):
        ...
    # zk.Election("/election/scheduler", "host-a").run(lead)
    election = locks.election("scheduler", ttl=10)
    with election.campaign(value="host-a", timeout=5) as leadership:
        term = leadership.term  # lead while this block runs
    # --8<-- [end:kazoo]
    locks.close()
    return fence, term


def tooz(url: str) -> bool:
    # --8<-- [start:tooz]
    # coordinator = coordination.get_coordinator("redis://localhost:6379?lock_timeout=30",
    #                                            b"worker-1"); coordinator.start(start_heart=True)
    locks = tenure.connect(url)  # "redis://localhost:6379/0"; no member id, no start()

    # lock = coordinator.get_lock(b"rebuild-index"); lock.acquire(blocking=5)
    lock = locks.lock("rebuild-index", ttl=30, renew=True)  # renew: the heartbeat
    acquired = lock.acquire(timeout=5)
    if acquired:
        try:
            ...  # rebuild
        finally:
            lock.release()
    # coordinator.stop()
    locks.close()
    # --8<-- [end:tooz]
    return acquired
