"""Worker processes for multi-process tests, on any backend URL.

    python -m tests.integration.workers counter URL NAME FILE ROUNDS
        ROUNDS times: under the lock, read an integer from FILE, pause, write it + 1 back
        (a non-atomic read-modify-write: any overlap loses an update). Prints its fences.
    python -m tests.integration.workers hold URL NAME TTL
        acquire, print "acquired <fence>", then sleep until killed.
    python -m tests.integration.workers fences URL NAME COUNT
        COUNT acquire/release cycles; prints every fence.
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


def main(argv: list[str]) -> None:
    command, url, name, *rest = argv
    if command == "counter":
        counter(url, name, rest[0], int(rest[1]))
    elif command == "hold":
        hold(url, name, float(rest[0]))
    elif command == "fences":
        fences(url, name, int(rest[0]))
    else:
        raise SystemExit(f"unknown worker command {command!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
