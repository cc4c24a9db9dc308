#!/usr/bin/env python3
"""CPU microseconds per uncontended acquire + release, memory:// and a SQLite temp file.

    .venv/bin/python bench/cycle_cpu.py [--cycles N] [--rounds R] [--only memory|sqlite]
    PYTHONPATH=/tmp/old/src .venv/bin/python bench/cycle_cpu.py   # an older tree's figures

One sync client per backend, one lock handle, ``acquire()`` then ``release()`` in a loop: the
lease logic's own cost and the store's, with no waiting in it. ``time.process_time`` (this
process's user + system CPU), not the wall clock, so two runs on a busy machine still compare;
the best of ``--rounds`` rounds of ``--cycles`` cycles is printed (the least disturbed). Only
``tenure.connect(url).lock(name, ttl=...)`` and the handle's acquire / release are used, an API
every tree since the first release has, so ``PYTHONPATH`` can point it at an old checkout's
``src`` to set the figures of two commits side by side (interleave the runs: the machine's load
moves the floor). Figures only: nothing here asserts anything.
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import tempfile
import time

import tenure

WARM_UP = 200
"""Cycles before the timed rounds: the first acquire opens the connection and makes the
schema and the instruments."""


def best_cycle_us(url: str, cycles: int, rounds: int) -> float:
    """The least CPU microseconds per cycle over ``rounds`` rounds of ``cycles`` cycles."""
    locks = tenure.connect(url)
    try:
        lock = locks.lock("bench-cycle", ttl=30)
        acquire, release = lock.acquire, lock.release
        for _ in range(WARM_UP):
            acquire()
            release()
        best = float("inf")
        for _ in range(rounds):
            started = time.process_time()
            for _ in range(cycles):
                acquire()
                release()
            best = min(best, time.process_time() - started)
    finally:
        locks.close()
    return best * 1e6 / cycles


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cycles", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--only", choices=("memory", "sqlite"))
    args = parser.parse_args()
    where = pathlib.Path(tenure.__file__).resolve().parent.parent
    print(f"tenure from {where}; best of {args.rounds} x {args.cycles} cycles, CPU us per cycle")
    with tempfile.TemporaryDirectory(prefix="tenure-cycle-") as here:
        urls = {"memory": "memory://bench-cycle",
                "sqlite": f"sqlite:///{pathlib.Path(here) / 'cycle.db'}"}
        for backend, url in urls.items():
            if args.only in (None, backend):
                print(f"{backend:8} {best_cycle_us(url, args.cycles, args.rounds):7.2f}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
