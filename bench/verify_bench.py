#!/usr/bin/env python3
"""How fast ``tenure.verify.check`` decides a history: the issue's target is a 10,000-call,
8-client history on 4 names in under 10 s.

    .venv/bin/python bench/verify_bench.py [--operations N] [--rounds R]

Histories come from ``tenure.verify.simulation.simulate`` (a correct store in simulated
time, so each is linearizable and the checker must explore until it has proved it: the
slow case; a violation usually ends the search early). Rows vary how much calls overlap
(latency against the ttl) and the share of lost answers, which is what makes the search
expensive: an unanswered call may take effect anywhere after its invocation; then the other
primitives (a semaphore, read-write locks with a third of the acquires writing and
``inspect`` listing the live leases, elections read with ``leader()``). The best of
``--rounds`` is kept. Prints a Markdown table; no assertions: figures only.
"""

from __future__ import annotations

import argparse
import time

from tenure.verify import check
from tenure.verify.simulation import simulate

CASES = [
    # (label, latency, ttl, lost, primitive, limit)
    ("short calls (10 ms), no lost answers", 0.01, 0.2, 0.0, "lock", 1),
    ("short calls, 1% lost answers", 0.01, 0.2, 0.01, "lock", 1),
    ("calls up to the ttl long, 1% lost", 0.05, 0.1, 0.01, "lock", 1),
    ("calls up to the ttl long, 5% lost", 0.05, 0.1, 0.05, "lock", 1),
    ("calls up to the ttl long, 20% lost", 0.05, 0.1, 0.2, "lock", 1),
    ("calls up to 4x the ttl long, 20% lost", 0.2, 0.1, 0.2, "lock", 1),
    ("semaphore limit 3, short calls, 1% lost", 0.01, 0.2, 0.01, "semaphore", 3),
    ("rwlock, short calls, no lost answers", 0.01, 0.2, 0.0, "rwlock", 1),
    ("rwlock, short calls, 1% lost", 0.01, 0.2, 0.01, "rwlock", 1),
    ("rwlock, calls up to the ttl long, 5% lost", 0.05, 0.1, 0.05, "rwlock", 1),
    ("rwlock, calls up to the ttl long, 20% lost", 0.05, 0.1, 0.2, "rwlock", 1),
    ("rwlock, calls up to 4x the ttl long, 20% lost", 0.2, 0.1, 0.2, "rwlock", 1),
    ("election, short calls, 1% lost", 0.01, 0.2, 0.01, "election", 1),
    ("election, calls up to the ttl long, 20% lost", 0.05, 0.1, 0.2, "election", 1),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--operations", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=3)
    options = parser.parse_args()
    print(f"{options.operations} calls, 8 clients, 4 names, best of {options.rounds}\n")
    print("| history | verdict | seconds | calls/s |")
    print("|---|---|---:|---:|")
    for label, latency, ttl, lost, primitive, limit in CASES:
        history = simulate(options.operations, clients=8, names=4, latency=latency, ttl=ttl,
                           lost=lost, limit=limit, seed=1, primitive=primitive)
        best = float("inf")
        verdict = ""
        for _ in range(options.rounds):
            started = time.perf_counter()
            report = check(history)
            best = min(best, time.perf_counter() - started)
            verdict = report.summary().partition(":")[0]
        print(f"| {label} | {verdict} | {best:.2f} | {options.operations / best:,.0f} |")


if __name__ == "__main__":
    main()
