"""The Redis backend against real servers: loss on a restart, dead servers, hostile names,
waiters woken rather than polling, fair hand-off, SCAN listing, unix sockets, TLS, lost
script caches, cancelled waits, fork."""

from __future__ import annotations

import asyncio
import os
import pathlib
import secrets
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis
import redis.asyncio

import tenure
from tenure._errors import BackendError, InvalidArgument, LockLost
from tenure._types import Busy, Grant, Holder, Kind, LeaseSpec, Mode, Renewal
from tenure.backends.redis._rwlocks import queue_keys
from tenure.backends.redis._scripts import ACQUIRE, ALL_SCRIPTS, lock_keys
from tenure.backends.redis._semaphores import semaphore_keys
from tenure.backends.redis._sync import RedisBackend
from tests.integration.waking import (
    SLOW_TIMER_FLOOR,
    asyncio_wake_latency,
    slow_timer,  # noqa: F401 (a fixture)
    slow_timer_url,
    until,
    until_async,
    wake_latency,
)
from tests.servers._process import ManagedServer, ServerFailed, free_port, require_binary
from tests.servers.redis import RedisSentinel, RedisServer, _ping, _workdir, start_redis

pytestmark = pytest.mark.redis

HOLDER = Holder("test-host", os.getpid(), "test")
LOCK = LeaseSpec()


def blocked(client: redis.Redis) -> int:
    """How many clients block on the server (a lock's waiters, in BLPOP)."""
    return int(client.info("clients")["blocked_clients"])


def command_counts(url: str) -> dict[str, int]:
    client = redis.Redis.from_url(url)
    try:
        stats: dict[str, Any] = client.info("commandstats")
    finally:
        client.close()
    return {key.removeprefix("cmdstat_"): int(value["calls"]) for key, value in stats.items()}


# ---- loss is an event -----------------------------------------------------------------------


def test_restart_without_persistence_reports_the_loss(dedicated_redis: RedisServer) -> None:
    lost: list[tenure.Lock] = []
    hook_calls: list[Any] = []
    previous_hook = threading.excepthook
    threading.excepthook = hook_calls.append
    try:
        with tenure.connect(dedicated_redis.url) as locks:
            lock = locks.lock("restart", ttl=0.6, renew=True, on_lost=lost.append)
            assert lock.acquire(timeout=5)
            fence = lock.fence
            dedicated_redis.restart()  # no persistence: the lease key is gone
            assert lock.lost.wait(5), "the next renewal must report the loss"
            assert lost == [lock]
            with pytest.raises(LockLost):
                lock.check()
            with pytest.raises(LockLost):
                lock.release()
            # The lock is free again, and its fence did not go back with the lost data: the
            # next one starts from the server's clock.
            again = locks.lock("restart", ttl=5)
            assert again.acquire(timeout=5)
            assert again.fence is not None and fence is not None and again.fence > fence
            again.release()
    finally:
        threading.excepthook = previous_hook
    assert hook_calls == [], "an exception escaped into a renewal thread"


def test_restart_reports_the_loss_to_asyncio_holders(dedicated_redis: RedisServer) -> None:
    async def scenario() -> None:
        lost: list[Any] = []
        loop_errors: list[Any] = []
        asyncio.get_running_loop().set_exception_handler(lambda _, ctx: loop_errors.append(ctx))
        async with tenure.connect_async(dedicated_redis.url) as locks:
            lock = locks.lock("restart-async", ttl=0.6, renew=True, on_lost=lost.append)
            assert await lock.acquire(timeout=5)
            dedicated_redis.restart()
            await asyncio.wait_for(lock.lost.wait(), 5)
            assert lost == [lock]
            with pytest.raises(LockLost):
                lock.check()
        assert loop_errors == []

    asyncio.run(scenario())


def test_with_aof_fences_and_leases_survive_a_restart() -> None:
    with _workdir("tenure-redis-aof-") as workdir:
        server = start_redis(workdir, unix_socket=False, persistence=True)
        try:
            with tenure.connect(server.url) as locks:
                lock = locks.lock("durable", ttl=60)
                fences = []
                for _ in range(2):
                    assert lock.acquire(timeout=1)
                    fences.append(lock.fence)
                    if len(fences) == 1:
                        lock.release()
                server.restart()  # appendfsync always: every grant was on disk before its reply
                assert lock.owned()  # the lease came back with its absolute expiry
                lock.release()
                assert lock.acquire(timeout=1)
                fences.append(lock.fence)
                assert fences == sorted(set(fences))  # strictly increasing: never repeats
                lock.release()
        finally:
            server.stop()


def test_idle_lock_records_are_collected_and_fences_never_go_back(redis_url: str) -> None:
    name = f"gc:{secrets.token_hex(8)}"
    keys = lock_keys("tenure", name)
    client = redis.Redis.from_url(redis_url)
    with tenure.connect(redis_url, gc_after=0.3) as locks:
        lock = locks.lock(name, ttl=5)
        assert lock.acquire(blocking=False)
        first = lock.fence
        assert first is not None
        # The record outlives the lease by gc_after, and a renewal pushes both.
        assert 5000 < client.pttl(keys.meta) <= 5300
        time.sleep(0.5)
        lock.extend(10)
        assert 10_000 < client.pttl(keys.meta) <= 10_300
        lock.release()
        lock = locks.lock(name, ttl=0.2)
        assert lock.acquire(blocking=False)
        second = lock.fence
        assert second is not None and second > first
        lock.release()
        until(lambda: not client.exists(keys.meta), "the idle record was collected", timeout=3)
        assert locks.inspect(name) is None and locks.list_locks(name) == []
        again = locks.lock(name, ttl=5)
        assert again.acquire(blocking=False)
        assert again.fence is not None and again.fence > second
        third = again.fence
        again.release()
        client.delete(*keys[:3])  # lost data (a restart without persistence)
        assert again.acquire(blocking=False)
        assert again.fence is not None and again.fence > third
        again.release()
    with tenure.connect(redis_url, gc_after="none") as locks:
        kept = locks.lock(name, ttl=5)
        assert kept.acquire(blocking=False)
        assert client.pttl(keys.meta) == -1  # kept forever
        kept.extend(5)
        assert client.pttl(keys.meta) == -1
        kept.release()
    client.close()


def test_stopped_server_keeps_renewing_until_the_lease_ends(
    dedicated_redis: RedisServer,
) -> None:
    with tenure.connect(dedicated_redis.url, socket_timeout=0.3) as locks:
        lock = locks.lock("paused", ttl=1.0, renew=True)
        assert lock.acquire(timeout=5)
        dedicated_redis.pause()
        try:
            assert lock.lost.wait(5)
            with pytest.raises(LockLost) as caught:
                lock.check()
            assert isinstance(caught.value.__cause__, BackendError)
        finally:
            dedicated_redis.resume()


# ---- a dead server is an error, not a hang -------------------------------------------------


def test_stopped_server_fails_acquire_at_once(dedicated_redis: RedisServer) -> None:
    with tenure.connect(dedicated_redis.url) as locks:
        lock = locks.lock("dead", ttl=5)
        assert lock.acquire(timeout=1)
        lock.release()
        dedicated_redis.stop()
        started = time.monotonic()
        with pytest.raises(BackendError) as caught:
            lock.acquire(timeout=30)
        assert time.monotonic() - started < 5
        assert isinstance(caught.value.__cause__, redis.ConnectionError)


def test_paused_server_fails_acquire_within_the_socket_timeout(
    dedicated_redis: RedisServer,
) -> None:
    with tenure.connect(dedicated_redis.url, socket_timeout=0.5) as locks:
        assert locks.lock("warm", ttl=5).acquire(timeout=1)
        dedicated_redis.pause()
        try:
            started = time.monotonic()
            with pytest.raises(BackendError) as caught:
                locks.lock("frozen", ttl=5).acquire(timeout=60)
            assert time.monotonic() - started < 5
            assert isinstance(caught.value.__cause__, redis.TimeoutError)
        finally:
            dedicated_redis.resume()


def test_paused_server_fails_a_waiting_acquire_too(dedicated_redis: RedisServer) -> None:
    async def scenario() -> None:
        async with tenure.connect_async(dedicated_redis.url, socket_timeout=0.5) as locks:
            holder = locks.lock("held", ttl=30)
            assert await holder.acquire()
            waiter = asyncio.create_task(locks.lock("held", ttl=5).acquire(timeout=60))
            await asyncio.sleep(0.3)  # the waiter is blocked in BLPOP now
            dedicated_redis.pause()
            try:
                with pytest.raises(BackendError):
                    await asyncio.wait_for(waiter, 10)
            finally:
                dedicated_redis.resume()

    asyncio.run(scenario())


# ---- names are data -------------------------------------------------------------------------

HOSTILE_NAMES = [
    "with spaces",
    "with 'single' and \"double\" quotes",
    "{braces}",
    "{",
    "}",
    "{}",
    "a{b}c",
    "%s %d %%",
    "line\nbreak\r\n",
    "ünïcødé ✓ 锁",
    "tab\tand \\ backslash",
    "]] redis.call('FLUSHALL') --",
    "KEYS[1]",
    "é" * 512,  # 1024 bytes of UTF-8
    "x" * 1024,
    "x" * 1023,
]


def test_hostile_names_each_map_to_exactly_one_lock(redis_url: str) -> None:
    prefix = f"hostile:{secrets.token_hex(4)}:"
    canary = f"canary:{secrets.token_hex(8)}"
    client = redis.Redis.from_url(redis_url)
    client.set(canary, "still here")
    short = [prefix + name for name in HOSTILE_NAMES if len((prefix + name).encode()) <= 1024]
    names = short + list(HOSTILE_NAMES)
    with tenure.connect(redis_url) as locks:
        held = []
        for name in names:
            lock = locks.lock(name, ttl=30)
            assert lock.acquire(blocking=False), f"{name!r} collided with another name"
            held.append(lock)
        for name in names:
            assert locks.lock(name, ttl=30).acquire(blocking=False) is False
            info = locks.inspect(name)
            assert info is not None and info.name == name and info.held
        listed = [info.name for info in locks.list_locks(prefix)]
        assert listed == sorted(short)
        for lock in held:
            lock.release()
    assert client.get(canary) == b"still here"
    client.close()


def test_names_over_1024_bytes_are_refused(redis_url: str) -> None:
    with tenure.connect(redis_url) as locks, pytest.raises(InvalidArgument):
        locks.lock("é" * 512 + "x", ttl=5)


def test_every_key_of_a_lock_shares_one_hash_tag() -> None:
    from redis.crc import key_slot

    for name in HOSTILE_NAMES:
        keys = lock_keys("tenure", name)
        tags = {key[key.index("{") + 1 : key.index("}")] for key in keys}
        assert len(tags) == 1 and len(tags.pop()) == 32
        slots = {key_slot(key.encode()) for key in keys}
        assert len(slots) == 1


def test_scripts_are_fixed_texts_loaded_once(redis_url: str) -> None:
    # Names reach Lua only as KEYS/ARGV: every script is one constant text, whose SHA-1 the
    # server computes the same (so EVALSHA always names the same code, for every name).
    client = redis.Redis.from_url(redis_url)
    for script in ALL_SCRIPTS:
        assert client.script_load(script.source) == script.sha
    client.close()


# ---- waiting: woken, not polling; fair hand-off ---------------------------------------------


def test_waiters_sleep_until_woken(dedicated_redis: RedisServer) -> None:
    url = dedicated_redis.url
    with tenure.connect(url) as locks:
        holder = locks.lock("sleepy", ttl=30)
        assert holder.acquire()
        got: list[float] = []

        def wait() -> None:
            lock = locks.lock("sleepy", ttl=30)
            assert lock.acquire(timeout=30)
            got.append(time.monotonic())
            lock.release()

        threads = [threading.Thread(target=wait) for _ in range(4)]
        for thread in threads:
            thread.start()
        time.sleep(0.5)  # past the waiters' first short pauses
        before = command_counts(url)
        time.sleep(2.0)
        during = command_counts(url)
        released = time.monotonic()
        holder.release()
        for thread in threads:
            thread.join(10)
    # One wait is one round trip (BLPOP and acquire pipelined), blocking at least
    # max_backoff / 2 once the back-off has grown: four waiters over two seconds make at most
    # 4 x 2 / 0.25 = 32 waits. A 100 ms poll would be 80 round trips; spinning, thousands.
    waits = during.get("blpop", 0) - before.get("blpop", 0)
    assert waits <= 4 * 2.0 / (RedisBackend.max_backoff / 2) + 4, (before, during)
    scripts = sum(during.get(c, 0) - before.get(c, 0) for c in ("evalsha", "eval"))
    assert scripts <= waits + 4, (before, during)
    assert len(got) == 4
    assert min(got) - released < 1.0  # promptly (the counts above show it was not a timer)


@pytest.mark.usefixtures("slow_timer")
def test_first_wait_on_an_empty_script_cache_is_woken(redis_url: str) -> None:
    # A fresh or restarted server has no script cached: the acquire pipelined behind the
    # wait's BLPOP fails with NOSCRIPT, and the lock logic's next acquire loads it (at once:
    # a pause would be the slow timer's, past SLOW_TIMER_FLOOR).
    name = f"cold:{secrets.token_hex(8)}"
    client = redis.Redis.from_url(redis_url)
    with tenure.connect(slow_timer_url(redis_url)) as locks:
        latency = wake_latency(
            locks, name, once_held=client.script_flush,
            queued=lambda: blocked(client),
        )
    client.close()
    assert latency < SLOW_TIMER_FLOOR, latency


@pytest.mark.usefixtures("slow_timer")
def test_asyncio_waiters_are_woken_by_the_release(redis_url: str) -> None:
    # The waiting state travels in the Busy answer, not in a context variable: the lock
    # logic's acquire runs in a task of its own (shielded from cancellation), whose context
    # changes never reach the waiting caller.
    name = f"async-wake:{secrets.token_hex(8)}"
    client = redis.Redis.from_url(redis_url)
    latency = asyncio_wake_latency(
        slow_timer_url(redis_url), name, queued=lambda: blocked(client)
    )
    client.close()
    assert latency < SLOW_TIMER_FLOOR, latency


def test_one_renewal_batch_mixes_kinds(redis_url: str) -> None:
    """The store's extend_many takes leases of every kind in one batch (one script call per
    kind, sent together) and answers in the order asked, each kind's leases apart."""
    name = f"mixed:{secrets.token_hex(8)}"
    backend = RedisBackend.from_url(redis_url)
    semaphore = LeaseSpec(Kind.SEMAPHORE, limit=2)
    rwlock = LeaseSpec(Kind.RWLOCK, mode=Mode.READ, queue_ttl=30.0)
    lock_token, permit_token, read_token = (secrets.token_hex(16) for _ in range(3))
    try:
        assert isinstance(backend.acquire(name, LOCK, lock_token, 30, HOLDER), Grant)
        assert isinstance(backend.acquire(name, semaphore, permit_token, 30, HOLDER), Grant)
        assert isinstance(backend.acquire(name, rwlock, read_token, 30, HOLDER), Grant)
        renewals = [
            Renewal(name, read_token, 60, Kind.RWLOCK),
            Renewal(name, lock_token, 60, Kind.LOCK),
            Renewal(name, "nobody", 60, Kind.SEMAPHORE),
            Renewal(name, permit_token, 60, Kind.SEMAPHORE),
            Renewal(name, permit_token, 60, Kind.LOCK),  # a token of another kind's lease
        ]
        assert backend.extend_many(renewals) == [True, True, False, True, False]
        for kind in (Kind.LOCK, Kind.SEMAPHORE, Kind.RWLOCK):
            info = backend.inspect(kind, name)
            assert info is not None and info.holders[0].ttl_left > 30, kind
    finally:
        for kind in (Kind.LOCK, Kind.SEMAPHORE, Kind.RWLOCK):
            backend.break_leases(kind, name)
        backend.close()


def test_a_release_hands_the_lock_to_the_longest_blocked_waiter(redis_url: str) -> None:
    # The wait's protocol, with blocking waits longer than the lock logic's (which re-block
    # every max_backoff at most): BLPOP the wake list with the acquire pipelined behind it.
    name = f"fair:{secrets.token_hex(8)}"
    keys = lock_keys("tenure", name)
    backend = RedisBackend.from_url(redis_url)
    client = redis.Redis.from_url(redis_url)
    holder = secrets.token_hex(16)
    replies: dict[str, Any] = {}

    def wait(token: str) -> None:
        waiter = redis.Redis.from_url(redis_url)
        pipe = waiter.pipeline(transaction=False)
        pipe.blpop([keys.wake], 10)
        pipe.evalsha(ACQUIRE.sha, 4, keys.meta, keys.lease, keys.wake, keys.left(token),
                     token, 30_000, name, "h", 1, "t", "1", "0", "", 0, "1")
        replies[token] = pipe.execute()[1]
        waiter.close()

    try:
        assert isinstance(backend.acquire(name, LOCK, holder, 30, HOLDER), Grant)
        early, late = secrets.token_hex(16), secrets.token_hex(16)
        threads = []
        for count, token in enumerate((early, late), start=1):
            threads.append(threading.Thread(target=wait, args=(token,)))
            threads[-1].start()
            until(lambda count=count: blocked(client) >= count, "waiter blocked", timeout=10)
        assert backend.release(Kind.LOCK, name, holder)
        # The earliest waiter's acquire ran in the release's turn: the releaser, coming
        # straight back, finds the lock taken.
        assert isinstance(backend.acquire(name, LOCK, secrets.token_hex(16), 30, HOLDER), Busy)
        threads[0].join(10)
        assert replies[early][0] == 1 and late not in replies
        assert backend.release(Kind.LOCK, name, early)
        threads[1].join(10)
        assert replies[late][0] == 1
        assert replies[late][1] > replies[early][1]
    finally:
        backend.break_leases(Kind.LOCK, name)
        backend.close()
        client.close()


def test_a_wait_still_in_flight_after_its_waiter_left_grants_nothing(redis_url: str) -> None:
    # A waiter that gave up while its BLPOP was still blocked on the server (a connection the
    # server has not yet seen closed): the acquire pipelined behind it must not take the lock
    # for a token nobody holds any more.
    name = f"left:{secrets.token_hex(8)}"
    keys = lock_keys("tenure", name)
    backend = RedisBackend.from_url(redis_url)
    client = redis.Redis.from_url(redis_url)
    holder, gone = secrets.token_hex(16), secrets.token_hex(16)
    replies: list[Any] = []

    def wait() -> None:
        waiter = redis.Redis.from_url(redis_url)
        pipe = waiter.pipeline(transaction=False)
        pipe.blpop([keys.wake], 10)
        pipe.evalsha(ACQUIRE.sha, 4, keys.meta, keys.lease, keys.wake, keys.left(gone),
                     gone, 30_000, name, "h", 1, "t", "1", "0", "", 0, "1")
        replies.append(pipe.execute()[1])
        waiter.close()

    try:
        assert isinstance(backend.acquire(name, LOCK, holder, 30, HOLDER), Grant)
        thread = threading.Thread(target=wait)
        thread.start()
        until(lambda: blocked(client) >= 1, "waiter blocked", timeout=10)
        backend._leave(name, gone)
        assert backend.release(Kind.LOCK, name, holder)
        thread.join(10)
        assert replies and replies[0][0] == 0
        assert client.hget(keys.lease, "token") is None
    finally:
        backend.break_leases(Kind.LOCK, name)
        backend.close()
        client.close()


def test_no_reservation_for_a_waiter_that_gave_up(redis_url: str) -> None:
    name = f"gone:{secrets.token_hex(8)}"
    with tenure.connect(redis_url) as locks:
        holder = locks.lock(name, ttl=30)
        assert holder.acquire()
        assert locks.lock(name, ttl=30).acquire(timeout=0.2) is False  # waited, gave up
        holder.release()
        # Nobody is waiting any more: the lock is free for anyone at once.
        newcomer = locks.lock(name, ttl=30)
        assert newcomer.acquire(blocking=False)
        newcomer.release()


@pytest.mark.parametrize("options", [{"handoff_window": 0}, {"wait_connections": 0}])  # the
# first is accepted and ignored (there are no reservations any more)
def test_waiting_without_reservations_or_blocking_waits(
    redis_url: str, options: dict[str, Any]
) -> None:
    name = f"options:{secrets.token_hex(8)}"
    with tenure.connect(redis_url, **options) as locks:
        holder = locks.lock(name, ttl=30)
        assert holder.acquire()
        first = holder.fence
        got: list[bool] = []
        thread = threading.Thread(target=lambda: got.append(locks.lock(name).acquire(timeout=10)))
        thread.start()
        time.sleep(0.3)
        holder.release()
        thread.join(10)
        assert got == [True]
        info = locks.inspect(name)
        assert info is not None and info.held and first is not None and info.fence > first


COLLIDING: dict[str, Any] = {
    "lock": (lambda name: lock_keys("tenure", name).meta,
             lambda locks, name: locks.lock(name, ttl=5)),
    "semaphore": (lambda name: semaphore_keys("tenure", name).meta,
                  lambda locks, name: locks.semaphore(name, 2, ttl=5)),
    "read-write lock": (lambda name: queue_keys("tenure", name).meta,
                        lambda locks, name: locks.rwlock(name, ttl=5).write()),
}
"""Each record: its meta key (which names the name it belongs to), and a handle on it."""


@pytest.mark.parametrize("record", sorted(COLLIDING))
def test_a_digest_taken_by_another_name_is_an_error_in_the_one_form(
    redis_url: str, record: str
) -> None:
    name = f"collision:{secrets.token_hex(8)}"
    meta, handle = COLLIDING[record]
    client = redis.Redis.from_url(redis_url)
    client.hset(meta(name), mapping={"name": "some other name", "fence": 7})
    with tenure.connect(redis_url) as locks, pytest.raises(BackendError) as raised:
        handle(locks, name).acquire(blocking=False)
    client.close()
    assert str(raised.value) == (
        f"{locks.store.describe()}: acquire of {name!r} failed: the key of {record} "
        f"{name!r} already belongs to {record} 'some other name' (a SHA-256 digest "
        "collision); use another name"
    )
    assert raised.value.__cause__ is not None


def test_cross_process_handoff_goes_to_the_waiting_process(redis_url: str) -> None:
    name = f"handoff:{secrets.token_hex(8)}"
    script = (
        "import sys, tenure\n"
        "locks = tenure.connect(sys.argv[1])\n"
        "lock = locks.lock(sys.argv[2], ttl=30)\n"
        "assert lock.acquire(timeout=30)\n"
        "print('got', flush=True)\n"
        "lock.release()\n"
    )
    with tenure.connect(redis_url) as locks:
        mine = locks.lock(name, ttl=30)
        assert mine.acquire()
        other = subprocess.Popen(
            [sys.executable, "-c", script, redis_url, name],
            stdout=subprocess.PIPE, text=True,
        )
        client = redis.Redis.from_url(redis_url)
        until(lambda: blocked(client) > 0, "the other process queued itself", timeout=30)
        client.close()
        mine.release()
        # Coming straight back we must wait for the other process's turn, not barge.
        assert mine.acquire(timeout=30)
        assert other.stdout is not None and other.stdout.readline() == "got\n"
        mine.release()
        assert other.wait(30) == 0
        other.stdout.close()


def test_a_try_expected_to_be_refused_waits_in_the_same_round_trip(
    dedicated_redis: RedisServer,
) -> None:
    """Once a client found a name held, its next blocking acquire sends the try, the wait and
    the try after it together. A refused try then waits without a round trip of its own; a
    granted one pushes the attempt's own wake list, so its BLPOP ends at once (the item is
    gone afterwards) instead of blocking until a release."""
    url = dedicated_redis.url
    client = redis.Redis.from_url(url)
    with tenure.connect(url) as locks:
        holder, other = locks.lock("combined", ttl=30), locks.lock("combined", ttl=30)
        assert holder.acquire()
        assert not other.acquire(blocking=False)  # the client now expects contention
        holder.release()
        before = command_counts(url)
        assert other.acquire(timeout=10)  # free: the first try grants
        after = command_counts(url)
        assert after.get("blpop", 0) - before.get("blpop", 0) == 1
        assert after["evalsha"] - before["evalsha"] == 2
        assert after["rpush"] - before.get("rpush", 0) == 1  # the grant pushed its own item
        assert list(client.scan_iter("*:own:*")) == []  # which the BLPOP took at once
        assert other.fence is not None
        info = locks.inspect("combined")
        assert info is not None and info.fence == other.fence  # the retry kept the fence
        # Held: the first try is refused and the same round trip waits for the release.
        waiting = threading.Thread(target=lambda: holder.acquire(timeout=10))
        waiting.start()
        until(lambda: blocked(client) == 1, "the waiter blocked")
        other.release()
        waiting.join(10)
        assert holder.fence is not None and holder.fence > info.fence
        holder.release()
    client.close()


def test_a_campaign_on_a_name_found_held_stores_its_value(redis_url: str) -> None:
    """An election's blocking campaign on a name this client found held moments ago (within
    CONTENDED_FOR): its first try may go with the wait in one round trip, and a grant from
    it stores the campaign's value, free name (the first try) or held (the try after the
    wait) alike."""
    name = f"campaign:{secrets.token_hex(8)}"
    with tenure.connect(redis_url) as locks:
        election = locks.election(name, ttl=30)
        first = election.campaign("first")
        assert not election.candidate("late").acquire(blocking=False)  # now "contended"
        first.resign()
        # Free: the combined step's first try grants.
        second = election.campaign("second", timeout=10)
        leader = election.leader()
        assert leader is not None and leader.value == "second" and leader.term == second.term
        # Held: refused, it waits in the same round trip and the try after the wait grants.
        assert not election.candidate("late").acquire(blocking=False)
        won: list[tenure.Leadership] = []
        campaigning = threading.Thread(
            target=lambda: won.append(election.campaign("third", timeout=10))
        )
        campaigning.start()
        time.sleep(0.2)
        second.resign()
        campaigning.join(10)
        assert won
        leader = election.leader()
        assert leader is not None and leader.value == "third" and leader.term == won[0].term
        won[0].resign()


def test_cancelled_waiter_leaves_no_lock_and_passes_its_turn_on(redis_url: str) -> None:
    name = f"cancel:{secrets.token_hex(8)}"

    async def scenario() -> None:
        async with tenure.connect_async(redis_url) as locks:
            holder = locks.lock(name, ttl=30)
            assert await holder.acquire()
            first = asyncio.create_task(locks.lock(name, ttl=30).acquire(timeout=30))
            await asyncio.sleep(0.3)
            second_lock = locks.lock(name, ttl=30)
            second = asyncio.create_task(second_lock.acquire(timeout=30))
            await asyncio.sleep(0.3)
            first.cancel()  # cancelled mid-BLPOP
            with pytest.raises(asyncio.CancelledError):
                await first
            await holder.release()
            assert await asyncio.wait_for(second, 5)
            await second_lock.release()
            info = await locks.inspect(name)
            assert info is not None and not info.held

    asyncio.run(scenario())


def test_many_cancellations_during_waits_leave_nothing(redis_url: str) -> None:
    name = f"cancel-many:{secrets.token_hex(8)}"

    async def scenario() -> None:
        async with tenure.connect_async(redis_url) as locks:
            holder = locks.lock(name, ttl=30)
            assert await holder.acquire()
            releaser = asyncio.create_task(asyncio.sleep(0))
            for attempt in range(30):
                task = asyncio.create_task(locks.lock(name, ttl=30).acquire(timeout=10))
                await asyncio.sleep(attempt * 0.001)
                if attempt == 15:
                    releaser = asyncio.create_task(holder.release())
                task.cancel()
                try:
                    took = await task
                except asyncio.CancelledError:
                    took = False
                assert not took or attempt >= 15
                if took:
                    await locks.break_lock(name)
            await releaser

            # A grant whose reply was in flight at the cancel is undone in the background,
            # so that the cancellation returns at once: the last one may still be on its way.
            async def free() -> bool:
                info = await locks.inspect(name)
                assert info is not None
                return not info.held

            await until_async(free, "the cancelled acquires' undo")
            final = locks.lock(name, ttl=30)
            assert await final.acquire(blocking=False)
            await final.release()

    asyncio.run(scenario())


# ---- listing, scripts, sockets, TLS, fork ---------------------------------------------------


def test_listing_scans_in_pages_and_never_uses_keys(dedicated_redis: RedisServer) -> None:
    url = dedicated_redis.url
    client = redis.Redis.from_url(url)
    for index in range(1200):  # noise SCAN must page past
        client.set(f"other:{index}", 1)
    with tenure.connect(url) as locks:
        fences = []
        for index in range(700):
            lock = locks.lock(f"many:{index:04d}", ttl=30)
            assert lock.acquire(blocking=False)
            fences.append(lock.fence)
            if index % 2:
                lock.release()
        infos = locks.list_locks("many:")
        assert [info.name for info in infos] == [f"many:{i:04d}" for i in range(700)]
        assert sum(info.held for info in infos) == 350
        assert [info.fence for info in infos] == fences
        # (names and fences: the lease left counts down between the two listings)
        assert [(i.name, i.fence) for i in locks.list_locks("many:0699")] == [
            (infos[-1].name, infos[-1].fence)
        ]
        assert locks.list_locks("nothing") == []
    counts = command_counts(url)
    assert counts.get("scan", 0) >= 2 and "keys" not in counts
    client.close()


def test_break_wakes_waiters_and_keeps_the_fence(redis_url: str) -> None:
    name = f"break:{secrets.token_hex(8)}"
    with tenure.connect(redis_url) as locks:
        holder = locks.lock(name, ttl=30)
        assert holder.acquire()
        fence = holder.fence
        assert fence is not None
        result: list[int | None] = []

        def wait() -> None:
            lock = locks.lock(name, ttl=30)
            assert lock.acquire(timeout=10)
            result.append(lock.fence)
            lock.release()

        thread = threading.Thread(target=wait)
        thread.start()
        time.sleep(0.5)
        started = time.monotonic()
        assert locks.break_lock(name) is True
        thread.join(10)
        assert len(result) == 1 and result[0] is not None and result[0] > fence
        assert time.monotonic() - started < 1.0
        assert locks.break_lock(name) is False
        with pytest.raises(LockLost):
            holder.release()


def test_lost_script_cache_is_reloaded(redis_url: str) -> None:
    name = f"flush:{secrets.token_hex(8)}"
    client = redis.Redis.from_url(redis_url)
    with tenure.connect(redis_url) as locks:
        holder = locks.lock(name, ttl=30)
        assert holder.acquire()
        client.script_flush()
        got: list[bool] = []
        thread = threading.Thread(target=lambda: got.append(locks.lock(name).acquire(timeout=10)))
        thread.start()
        time.sleep(0.3)
        client.script_flush()  # again, while the waiter waits
        time.sleep(0.3)
        holder.release()
        thread.join(10)
        assert got == [True]
        client.script_flush()
        assert locks.lock(f"{name}:2", ttl=5).acquire(blocking=False)
    client.close()


@pytest.mark.smoke  # redis-py 8.0.0 cannot connect over a unix socket: the floor is 8.0.1
def test_unix_socket(redis_unix_url: str) -> None:
    name = f"unix:{secrets.token_hex(8)}"
    with tenure.connect(redis_unix_url) as locks:
        with locks.lock(name, ttl=5, timeout=1) as lock:
            assert lock.fence is not None and lock.fence > 0
            info = locks.inspect(name)
            assert info is not None and info.held and info.holder is not None
            assert info.holder.pid == os.getpid()
        assert not locks.lock(name).locked()
    assert locks.backend.describe() == redis_unix_url


def test_child_after_fork_uses_its_own_connections(redis_url: str) -> None:
    name = f"fork:{secrets.token_hex(8)}"
    with tenure.connect(redis_url) as locks:
        lock = locks.lock(name, ttl=30)
        assert lock.acquire()
        pid = os.fork()
        if pid == 0:  # the child: the parent's lock is not ours; the client still works
            code = 0
            try:
                child = locks.lock(f"{name}:child", ttl=5)
                code = 0 if child.acquire(blocking=False) and lock.fence is None else 1
                child.release()
            except BaseException:
                code = 2
            os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert lock.owned()  # the parent's connections and lease are untouched
        lock.release()


@pytest.fixture
def tls_redis() -> Iterator[tuple[str, pathlib.Path]]:
    openssl = require_binary("openssl")
    with _workdir("tenure-redis-tls-") as workdir:
        result = subprocess.run(
            [openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
             "-keyout", str(workdir / "key.pem"), "-out", str(workdir / "cert.pem"),
             "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"],
            capture_output=True, text=True, timeout=60, check=False,
        )
        if result.returncode != 0:
            raise ServerFailed(f"openssl failed: {result.stderr}")
        tls_port = free_port()
        server = start_redis(
            workdir,
            unix_socket=False,
            extra_args=[
                "--tls-port", str(tls_port),
                "--tls-cert-file", str(workdir / "cert.pem"),
                "--tls-key-file", str(workdir / "key.pem"),
                "--tls-ca-cert-file", str(workdir / "cert.pem"),
                "--tls-auth-clients", "no",
            ],
        )
        try:
            yield f"rediss://127.0.0.1:{tls_port}/0", workdir / "cert.pem"
        finally:
            server.stop()


def test_tls(tls_redis: tuple[str, pathlib.Path]) -> None:
    url, certificate = tls_redis
    with (
        tenure.connect(url, ssl_ca_certs=str(certificate)) as locks,
        locks.lock("tls", ttl=5, timeout=1) as lock,
    ):
        assert lock.fence is not None and lock.fence > 0
    # Without the CA the certificate is refused: an error, not a plaintext fallback.
    with tenure.connect(url) as locks, pytest.raises(BackendError):
        locks.lock("tls", ttl=5).acquire(blocking=False)


def test_sentinel(dedicated_redis: RedisServer) -> None:
    with _workdir("tenure-sentinel-") as workdir:
        port = free_port()
        config = workdir / "sentinel.conf"  # sentinel rewrites it: it must be writable
        config.write_text(
            f"port {port}\nbind 127.0.0.1\ndir {workdir}\n"
            f"sentinel monitor tenure-master 127.0.0.1 {dedicated_redis.port} 1\n"
        )
        sentinel = ManagedServer(
            f"sentinel-{port}", [require_binary("redis-server"), str(config), "--sentinel"],
            workdir, lambda: _ping(port),
        )
        sentinel.start()
        try:
            url = f"redis+sentinel://127.0.0.1:{port}/tenure-master/0"
            with tenure.connect(url) as locks, locks.lock("via-sentinel", ttl=5, timeout=5):
                direct = redis.Redis.from_url(dedicated_redis.url)
                assert direct.exists(lock_keys("tenure", "via-sentinel").lease) == 1
                direct.close()
            # Read-write and fair locks reach the master the same way (the same scripts).
            with tenure.connect(url) as locks:
                rw = locks.rwlock("via-sentinel", ttl=5)
                with rw.read(timeout=5), rw.read(timeout=5):
                    assert locks.lock("via-sentinel", fair=True).acquire(blocking=False) is False
                with locks.lock("via-sentinel", fair=True, ttl=5, timeout=5) as fair:
                    info = locks.inspect("via-sentinel", kind="rwlock")
                    assert info is not None and [lease.mode for lease in info.leases] == ["write"]
                    assert fair.fence == info.fence
        finally:
            sentinel.stop()


def test_sentinel_failover_reaches_the_promoted_master(redis_sentinel: RedisSentinel) -> None:
    """Idle connections of a client that outlived a failover reach the promoted master, also
    once the killed one is back at its old address as a replica: reconnecting at the old
    address (redis-py's send does, for a Sentinel-managed connection) would meet a replica
    that refuses every write, for as long as the client lives."""
    name = f"failover-{secrets.token_hex(4)}"

    async def take(locks: tenure.AsyncLocks) -> int:
        async with locks.lock(name, ttl=30, timeout=5) as lock:
            return lock.fence

    with tenure.connect(redis_sentinel.url) as locks:
        runner = asyncio.Runner()
        flavours = runner.run(_connected_async(redis_sentinel.url))
        try:
            with locks.lock(name, ttl=30, timeout=5) as lock:
                fence = lock.fence
            fence = runner.run(take(flavours))
            old = redis_sentinel.primary()
            direct = redis.Redis(port=old.port)
            assert direct.wait(1, 5000) == 1  # the replica has every fence before the kill
            direct.close()
            redis_sentinel.kill_primary()
            promoted = redis_sentinel.wait_promoted(old)
            redis_sentinel.rejoin(old)
            with locks.lock(name, ttl=30, timeout=5) as lock:
                assert lock.fence > fence
                fence = lock.fence
            assert runner.run(take(flavours)) > fence
            assert redis_sentinel.primary() is promoted
        finally:
            runner.run(flavours.aclose())
            runner.close()


async def _connected_async(url: str) -> tenure.AsyncLocks:
    return tenure.connect_async(url)
