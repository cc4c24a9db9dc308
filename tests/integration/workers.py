"""Worker processes for multi-process tests, on any backend URL.

    python -m tests.integration.workers counter URL NAME FILE ROUNDS
        ROUNDS times: under the lock, read an integer from FILE, pause, write it + 1 back
        (a non-atomic read-modify-write: any overlap loses an update). Prints its fences.
    python -m tests.integration.workers hold URL NAME TTL
        acquire, print "acquired <fence>", then sleep until killed.
    python -m tests.integration.workers fences URL NAME COUNT
        COUNT acquire/release cycles; prints every fence.
    python -m tests.integration.workers permits URL NAME LIMIT WEIGHT ROUNDS HOLD TURN GO OUT
        connect, print "ready", wait until the file TURN exists, then ROUNDS times: take a
        permit of weight WEIGHT of the semaphore NAME (limit LIMIT), hold it HOLD seconds
        (the first one until the file GO exists too), release it. Writes one line per
        permit to OUT: "<asked ns> <entered ns> <left ns> <fence>", time.monotonic_ns()
        just before acquire was called, just after it returned and just before release
        (one clock for the host).
    python -m tests.integration.workers hold-permit URL NAME LIMIT TTL
        take a permit (renewed), print "acquired <fence>", then sleep until killed.
    python -m tests.integration.workers hold-reads URL NAME COUNT TTL
        take COUNT read leases of the read-write lock NAME (renewed), print "acquired" and
        their fences, then sleep until killed.
    python -m tests.integration.workers queued URL NAME SIDE ROUNDS HOLD START OUT
        connect, print "ready", wait until the file START exists, then ROUNDS times: take
        the SIDE of NAME ("read" or "write" of the read-write lock, "fair" for the fair
        lock), hold it HOLD seconds, release it. Writes one line per lease to OUT as it goes:
        "<asked ns> <entered ns> <left ns> <fence>", time.monotonic_ns() just before acquire
        was called, just after it returned and just before release.
"""

from __future__ import annotations

import pathlib
import sys
import time

import tenure


def counter(url: str, name: str, path: str, rounds: int) -> None:
    file = pathlib.Path(path)
    fences = []
    with tenure.connect(url) as locks:
        lock = locks.lock(name, ttl=30)
        for _ in range(rounds):
            with lock:
                value = int(file.read_text() or "0")
                time.sleep(0)  # yield: invite a race if exclusion were broken
                file.write_text(str(value + 1))
                fences.append(lock.fence)
    print(" ".join(map(str, fences)), flush=True)


def hold(url: str, name: str, ttl: float) -> None:
    locks = tenure.connect(url)
    lock = locks.lock(name, ttl=ttl)
    lock.acquire()
    print(f"acquired {lock.fence}", flush=True)
    while True:
        time.sleep(3600)


def fences(url: str, name: str, count: int) -> None:
    seen = []
    with tenure.connect(url) as locks:
        for _ in range(count):
            lock = locks.lock(name, ttl=30)
            lock.acquire()
            seen.append(lock.fence)
            lock.release()
    print(" ".join(map(str, seen)), flush=True)


def permits(url: str, name: str, limit: int, weight: int, rounds: int, hold: float,
            turn: str, go: str, out: str) -> None:
    lines = []
    with tenure.connect(url) as locks:
        locks.inspect(name, kind="semaphore")  # connect before the start line
        print("ready", flush=True)
        _wait_for_file(turn)
        permit = locks.semaphore(name, limit=limit, weight=weight, ttl=30)
        for round in range(rounds):
            asked = time.monotonic_ns()
            if not permit.acquire(timeout=300):
                raise SystemExit(f"no permit of {name!r} (weight {weight}) within 300 s")
            entered = time.monotonic_ns()
            if round == 0:
                _wait_for_file(go)
            time.sleep(hold)
            left = time.monotonic_ns()
            lines.append(f"{asked} {entered} {left} {permit.fence}")
            permit.release()
    pathlib.Path(out).write_text("\n".join(lines) + "\n")


def _wait_for_file(path: str, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while not pathlib.Path(path).exists():
        if time.monotonic() > deadline:
            raise SystemExit(f"{path} did not appear within {timeout} s")
        time.sleep(0.001)


def hold_permit(url: str, name: str, limit: int, ttl: float) -> None:
    locks = tenure.connect(url)
    permit = locks.semaphore(name, limit=limit, ttl=ttl, renew=True)
    permit.acquire()
    print(f"acquired {permit.fence}", flush=True)
    while True:
        time.sleep(3600)


def hold_reads(url: str, name: str, count: int, ttl: float) -> None:
    locks = tenure.connect(url)
    rwlock = locks.rwlock(name, ttl=ttl, renew=True)
    readers = [rwlock.read() for _ in range(count)]
    for reader in readers:
        reader.acquire()
    print("acquired", *(reader.fence for reader in readers), flush=True)
    while True:
        time.sleep(3600)


def queued(url: str, name: str, side: str, rounds: int, hold: float, start: str,
           out: str) -> None:
    with tenure.connect(url) as locks, open(out, "w") as lines:
        locks.inspect(name, kind="rwlock")  # connect before the start line
        print("ready", flush=True)
        while not pathlib.Path(start).exists():
            time.sleep(0.001)
        for _ in range(rounds):
            if side == "fair":
                handle = locks.lock(name, ttl=30, fair=True)
            else:
                rwlock = locks.rwlock(name, ttl=30)
                handle = rwlock.read() if side == "read" else rwlock.write()
            asked = time.monotonic_ns()
            if not handle.acquire(timeout=120):
                raise SystemExit(f"no {side} lease of {name!r} within 120 s")
            entered = time.monotonic_ns()
            time.sleep(hold)
            left = time.monotonic_ns()
            # Written line by line: a test reads a waiter's grant while others still run.
            lines.write(f"{asked} {entered} {left} {handle.fence}\n")
            lines.flush()
            handle.release()


def main(argv: list[str]) -> None:
    command, url, name, *rest = argv
    if command == "counter":
        counter(url, name, rest[0], int(rest[1]))
    elif command == "hold":
        hold(url, name, float(rest[0]))
    elif command == "fences":
        fences(url, name, int(rest[0]))
    elif command == "permits":
        limit, weight, rounds, seconds, turn, go, out = rest
        permits(url, name, int(limit), int(weight), int(rounds), float(seconds), turn, go, out)
    elif command == "hold-permit":
        hold_permit(url, name, int(rest[0]), float(rest[1]))
    elif command == "hold-reads":
        hold_reads(url, name, int(rest[0]), float(rest[1]))
    elif command == "queued":
        side, rounds, seconds, start, out = rest
        queued(url, name, side, int(rounds), float(seconds), start, out)
    else:
        raise SystemExit(f"unknown worker command {command!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
