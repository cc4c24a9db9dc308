#!/usr/bin/env python3
"""CPU per uncontended acquire + release on etcd: the client's and the cluster's, beside etcd's
lock service, in one run.

    .venv/bin/python bench/etcd_cpu_bench.py [--cycles N] [--rounds R] [--kind lock|semaphore]

A 3-node cluster on loopback (``tests/servers/etcd.py``). Each round takes a fresh name and
runs ``--cycles`` cycles of tenure's ``locks.lock(name, ttl=10)`` (or one permit of a limit=3
semaphore), then as many of etcd's lock service (``/v3/lock/lock`` + ``/v3/lock/unlock`` on a
lease granted once, through the same gateway client). Reported per cycle: this process's CPU
(user + system, ``getrusage``) and the three members' (``/proc/PID/stat``). CPU time, unlike
the wall-clock figures of ``consensus_bench.py``, hardly moves with the machine's load, so two
runs on a busy machine still compare. A fresh name per round: etcd keeps every key ever
written under a name in its index until a compaction, and a range over the name (the first
try's compare) visits them all, so a name's cost grows with its history.
"""

from __future__ import annotations

import argparse
import pathlib
import resource
import secrets
import sys
from collections.abc import Callable

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the test harness starts the servers

from tests.servers._process import cpu_seconds  # noqa: E402
from tests.servers.etcd import EtcdCluster, running_etcd_cluster  # noqa: E402

import tenure  # noqa: E402
from tenure.backends.etcd._config import parse as parse_etcd  # noqa: E402
from tenure.backends.etcd._keys import b64  # noqa: E402
from tenure.backends.etcd._sync.gateway import Gateway  # noqa: E402

WARM_UP = 20


def cpu_per_cycle(
    cluster: EtcdCluster, cycles: int, acquire: Callable[[], object], release: Callable[[], object]
) -> tuple[float, float]:
    """(client, cluster) CPU microseconds per cycle, warm-up excluded."""
    for _ in range(WARM_UP):
        acquire()
        release()

    def servers() -> float:
        return sum(cpu_seconds(member.server.pid) for member in cluster.members)

    before, started = servers(), resource.getrusage(resource.RUSAGE_SELF)
    for _ in range(cycles):
        acquire()
        release()
    ended, after = resource.getrusage(resource.RUSAGE_SELF), servers()
    client = ended.ru_utime + ended.ru_stime - started.ru_utime - started.ru_stime
    return client * 1e6 / cycles, (after - before) * 1e6 / cycles


def etcd_lock_service(
    gateway: Gateway, lease: str, name: str
) -> tuple[Callable[[], None], Callable[[], None]]:
    """etcd's v3lock service on ``lease``: (lock, unlock)."""
    held: list[str] = []

    def lock() -> None:
        held.append(gateway.post(
            "/v3/lock/lock", {"name": b64(f"bench/{name}"), "lease": lease}
        )["key"])

    def unlock() -> None:
        gateway.post("/v3/lock/unlock", {"key": held.pop()})

    return lock, unlock


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--kind", choices=("lock", "semaphore"), default="lock")
    args = parser.parse_args()
    with running_etcd_cluster() as cluster, tenure.connect(cluster.url) as locks:
        gateway = Gateway(parse_etcd(cluster.url, {"timeout": 60}))
        lease = str(gateway.post("/v3/lease/grant", {"TTL": "600"})["ID"])
        print("| round | lock | client us/cycle | cluster us/cycle |\n|---|---|---:|---:|")
        for round_ in range(1, args.rounds + 1):
            name = f"cpu-{secrets.token_hex(4)}"
            ours = (locks.semaphore(name, limit=3, ttl=10) if args.kind == "semaphore"
                    else locks.lock(name, ttl=10))
            lock_service, unlock_service = etcd_lock_service(gateway, lease, name)

            for label, acquire, release in (
                (f"tenure {args.kind}", ours.acquire, ours.release),
                ("etcd lock service", lock_service, unlock_service),
            ):
                client, servers = cpu_per_cycle(cluster, args.cycles, acquire, release)
                print(f"| {round_} | {label} | {client:.0f} | {servers:.0f} |", flush=True)
        gateway.post("/v3/lease/revoke", {"ID": lease})
        gateway.close()


if __name__ == "__main__":
    main()
