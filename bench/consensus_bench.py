#!/usr/bin/env python3
"""tenure on etcd and ZooKeeper beside each store's raw floor and its own lock recipe, in one
run.

    .venv/bin/python bench/consensus_bench.py [--seconds S] [--rounds R] [--handoffs N]
        [--processes N] [--stores etcd,zookeeper] [--no-write]

A 3-node etcd cluster and a 3-node ZooKeeper ensemble on loopback, started by the test
harness (``tests/servers/etcd.py``, ``tests/servers/zookeeper.py``: short Raft / tick timers,
data on the temp dir's disk).

1. Uncontended: one process, acquire + release of one name in a loop, ``--rounds`` (6)
   interleaved rounds of ``--seconds`` (2) per lock, best round kept (ZooKeeper: at least
   one round per member, every lock of a round connected to that one member: see
   ``round_urls``). Six, not two: with two, the other tenants of a 2-core machine set the
   ratio (tenure against etcd's lock service 0.85-0.95x, against kazoo's Lock 0.82-0.95x
   over six runs on 2026-12-02); best of six, each lock meets a quiet stretch and every
   ZooKeeper member twice (three runs the same evening: 0.93-0.97x and 1.04-1.12x):
   - etcd, raw floor: a guarded put (``/v3/kv/txn``, create if absent) and a delete
     (``/v3/kv/deleterange``) through the same JSON gateway client tenure uses: no lease,
     no fence, no waiting;
   - etcd, tenure: ``locks.lock(name, ttl=10)``;
   - etcd's lock service: ``POST /v3/lock/lock`` with a lease, ``/v3/lock/unlock`` (the lease
     granted once and kept alive, as etcd's own ``concurrency.Session`` does: its best case);
   - ZooKeeper, raw floor: kazoo ``create`` (ephemeral sequential) + ``delete``;
   - ZooKeeper, tenure: ``locks.lock(name, ttl=10)``;
   - kazoo's ``Lock`` recipe (``kazoo.recipe.lock.Lock``): ``acquire()`` + ``release()``.
2. Handoff: ``--processes`` (8) processes take turns on one lock (``_common.handoff``): the
   holder waits until all others block in acquire, holds 5..55 ms, stamps the release; the
   next holder stamps its grant. p50/p99 of release-to-grant, ``--handoffs`` (60) per lock.
   Every process counts the holders inside the lock (a shared counter raised after acquire
   returns, lowered before release is called): an acquire that finds another holder inside
   is an overlap.

Requests: every lock counts the requests it sends, reported per cycle (uncontended, warm-up
included) and per acquisition (handoff: every process's requests, waits included, over the
acquisitions). etcd: the HTTP requests of the JSON gateway client (``Gateway.requests``, a
watch counted as one request when it opens); ZooKeeper: the requests kazoo sends
(``KazooClient._call``, wrapped in every process: a ``multi`` is one request; the session's
pings are not counted).

Prints tables and writes docs/benchmarks-consensus.md (``--stores``: only those stores'
clusters and rows, e.g. ``etcd``; a report of fewer stores is best kept from the docs with
``--no-write``). No assertions: figures only.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import itertools
import json
import multiprocessing
import pathlib
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from typing import Any

import _common

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the test harness starts the servers

from tests.servers.etcd import start_etcd_cluster  # noqa: E402
from tests.servers.zookeeper import (  # noqa: E402
    SERVING_JVM,
    four_letter_word,
    start_zookeeper_ensemble,
)

import tenure  # noqa: E402
from tenure.backends.etcd._config import parse as parse_etcd  # noqa: E402
from tenure.backends.etcd._keys import b64  # noqa: E402
from tenure.backends.etcd._sync.gateway import Gateway  # noqa: E402

TTL = 10.0
STORES = ("etcd", "zookeeper")
KINDS = ("raw floor", "tenure", "native")
NATIVE = {"etcd": "etcd lock service", "zookeeper": "kazoo Lock"}

Opened = tuple[_common.Pair, Callable[[], None], Callable[[], int]]
"""An open lock: (acquire, release), its clean-up, and the requests it has sent so far."""
TALLY = ("requests", "cycles", "overlaps", "inside")
"""The shared counters of one lock's run (``Tally``), by index."""

_kazoo_requests = [0]
"""Requests kazoo sent in this process (``count_kazoo``)."""


def count_kazoo() -> Callable[[], int]:
    """Count every request kazoo sends in this process (once per process): all its calls,
    the recipes' included, go through ``KazooClient._call``."""
    from kazoo.client import KazooClient

    if not getattr(KazooClient._call, "counted", False):
        original = KazooClient._call

        def _call(self: Any, request: Any, async_object: Any) -> Any:
            _kazoo_requests[0] += 1
            return original(self, request, async_object)

        _call.counted = True  # type: ignore[attr-defined]
        KazooClient._call = _call
    return lambda: _kazoo_requests[0]


# ---- the locks: each a LockFactory (module level: spawned processes unpickle them) ----------


def counted(opener: Callable[[str, str], Opened], url: str, name: str, tally: Any
            ) -> tuple[_common.Pair, Callable[[], None]]:
    """The lock ``opener`` opens, counting into ``tally`` (a shared array, ``TALLY``): the
    requests it sends, its cycles, and overlaps (an acquire returning while another holder
    is inside)."""
    (acquire, release), close, requests = opener(url, name)
    start = requests()

    def counted_acquire() -> None:
        acquire()
        with tally.get_lock():
            tally[3] += 1
            if tally[3] > 1:
                tally[2] += 1

    def counted_release() -> None:
        with tally.get_lock():
            tally[3] -= 1
            tally[1] += 1
        release()

    def counted_close() -> None:
        with tally.get_lock():
            tally[0] += requests() - start
        close()

    return (counted_acquire, counted_release), counted_close


def tenure_lock(url: str, name: str) -> Opened:
    requests = count_kazoo() if url.startswith("zookeeper") else None
    locks = tenure.connect(url)
    lock = locks.lock(name, ttl=TTL)
    if requests is None:
        gateway = locks.backend.gateway  # type: ignore[attr-defined]
        requests = lambda: gateway.requests  # noqa: E731
    return (lock.acquire, lock.release), locks.close, requests


def etcd_floor(url: str, name: str) -> Opened:
    """A put if the key is absent, then a delete: the least a lock on etcd sends."""
    gateway = Gateway(parse_etcd(url, {}))
    key = b64(f"bench/floor/{name}")
    put = {
        "compare": [{"key": key, "target": "CREATE", "result": "EQUAL", "create_revision": "0"}],
        "success": [{"request_put": {"key": key, "value": b64("x")}}],
    }

    def acquire() -> None:
        if not gateway.post("/v3/kv/txn", put).get("succeeded"):
            raise RuntimeError("the floor's key exists: not uncontended")

    def release() -> None:
        gateway.post("/v3/kv/deleterange", {"key": key})

    return (acquire, release), gateway.close, lambda: gateway.requests


def etcd_lock_service(url: str, name: str) -> Opened:
    """etcd's v3lock service: the lock is a key on our lease; ``lock`` blocks server-side."""
    gateway = Gateway(parse_etcd(url, {"timeout": 600}))
    lease = str(gateway.post("/v3/lease/grant", {"TTL": str(int(TTL))})["ID"])
    held: list[str] = []
    last_alive = [time.monotonic()]

    def acquire() -> None:
        if time.monotonic() - last_alive[0] > TTL / 3:  # a session's keep-alive
            gateway.post_stream("/v3/lease/keepalive", json.dumps({"ID": lease}))
            last_alive[0] = time.monotonic()
        answer = gateway.post("/v3/lock/lock", {"name": b64(f"bench/lock/{name}"),
                                                "lease": lease})
        held.append(answer["key"])

    def release() -> None:
        gateway.post("/v3/lock/unlock", {"key": held.pop()})

    def close() -> None:
        with contextlib.suppress(Exception):
            gateway.post("/v3/lease/revoke", {"ID": lease})
        gateway.close()

    return (acquire, release), close, lambda: gateway.requests


def _kazoo(url: str) -> Any:
    from kazoo.client import KazooClient

    client = KazooClient(hosts=url.partition("://")[2], timeout=10.0)
    client.start(30)
    return client


def _stop(client: Any) -> None:
    client.stop()
    client.close()


def zookeeper_floor(url: str, name: str) -> Opened:
    requests = count_kazoo()
    client = _kazoo(url)
    parent = f"/bench/floor/{name}"
    client.ensure_path(parent)
    created: list[str] = []

    def acquire() -> None:
        created.append(client.create(f"{parent}/n-", b"", ephemeral=True, sequence=True))

    def release() -> None:
        client.delete(created.pop())

    return (acquire, release), functools.partial(_stop, client), requests


def kazoo_lock(url: str, name: str) -> Opened:
    requests = count_kazoo()
    client = _kazoo(url)
    lock = client.Lock(f"/bench/lock/{name}", "bench")
    return (lock.acquire, lock.release), functools.partial(_stop, client), requests


def round_urls(store: str, urls: dict[str, str]) -> Iterator[str]:
    """The URL of each uncontended round of ``store``'s locks. ZooKeeper: one member per
    round, the same for every lock of the round, the next member the next round. A session
    on the leader runs a cycle about twice as fast as one on a follower, and kazoo (which
    tenure's backend also uses) connects to a random member of a list: three clients on the
    whole list measured placement (tenure at 0.79-1.30x kazoo's Lock from round to round,
    the 2-request floor slower than the 4-request recipe), not the locks."""
    if store == "zookeeper":
        return itertools.cycle(urls["zookeeper-members"].split())
    return itertools.repeat(urls[store])


def uncontended_round(store: str, kind: str, urls: Iterator[str], name: str, tally: Any,
                      seconds: float) -> tuple[float, int]:
    lock = factory(store, kind, next(urls), name, tally)
    return _common.uncontended(lock, seconds, warmup=20, batch=5)


def factory(store: str, kind: str, url: str, name: str, tally: Any) -> _common.LockFactory:
    table: dict[tuple[str, str], Callable[[str, str], Opened]]
    table = {
        ("etcd", "raw floor"): etcd_floor,
        ("etcd", "tenure"): tenure_lock,
        ("etcd", "native"): etcd_lock_service,
        ("zookeeper", "raw floor"): zookeeper_floor,
        ("zookeeper", "tenure"): tenure_lock,
        ("zookeeper", "native"): kazoo_lock,
    }
    return functools.partial(counted, table[store, kind], url, name, tally)


# ---- the servers ------------------------------------------------------------------------------


@contextlib.contextmanager
def servers(stores: tuple[str, ...] = STORES) -> Iterator[dict[str, str]]:
    """store -> URL of a running 3-node cluster of each of ``stores``, stopped afterwards."""
    workdir = pathlib.Path(tempfile.mkdtemp(prefix="tenure-consensus-bench-"))
    etcd = zookeeper = None
    try:
        urls: dict[str, str] = {}
        if "etcd" in stores:
            (workdir / "etcd").mkdir()
            etcd = start_etcd_cluster(workdir / "etcd")
            urls["etcd"] = etcd.url
        if "zookeeper" in stores:
            (workdir / "zookeeper").mkdir()
            zookeeper = start_zookeeper_ensemble(workdir / "zookeeper", jvm=SERVING_JVM)
            urls |= {"zookeeper": zookeeper.url,
                     "zookeeper-port": str(zookeeper.members[0].client_port),
                     "zookeeper-members": " ".join(
                         f"zookeeper://127.0.0.1:{member.client_port}"
                         for member in zookeeper.members)}
        yield urls
    finally:
        for cluster in (etcd, zookeeper):
            if cluster is not None:
                cluster.stop()
        shutil.rmtree(workdir, ignore_errors=True)


def etcd_version() -> str:
    try:
        out = subprocess.run(["etcd", "--version"], capture_output=True, text=True, check=True)
        return out.stdout.splitlines()[0].split(":", 1)[1].strip()
    except (OSError, subprocess.CalledProcessError, IndexError):
        return "-"


def zookeeper_version(port: int) -> str:
    with contextlib.suppress(OSError):
        for line in four_letter_word(port, b"srvr").splitlines():
            if line.startswith("Zookeeper version:"):
                return line.split(":", 1)[1].split("-")[0].split(",")[0].strip()
    return "-"


# ---- the report -------------------------------------------------------------------------------


def label(store: str, kind: str) -> str:
    return f"{store} {NATIVE[store] if kind == 'native' else kind}"


def per_cycle(tally: Any) -> float:
    """Requests per cycle (or per acquisition) of one lock's run."""
    return float(tally[0] / tally[1]) if tally[1] else float("nan")


def report(
    facts: dict[str, str],
    rates: dict[tuple[str, str], tuple[float, int]],
    latencies: dict[tuple[str, str], list[int]],
    tallies: dict[tuple[str, str, str], Any],
    args: argparse.Namespace,
) -> str:
    lines = [
        "# Benchmark: tenure on etcd and ZooKeeper vs the raw store and its own lock recipe",
        "",
        "Generated by `.venv/bin/python bench/consensus_bench.py`; rerun it to refresh. Each "
        "store is a 3-node cluster on loopback started by the test harness (short Raft / tick "
        "timers, data on the local disk), one machine, so absolute figures mostly measure "
        "Python, the client libraries and the consensus round; compare the ratios. The machine "
        "is shared (2 cores, other jobs running, see the load average): treat differences "
        "under ~20% as noise.",
        "",
        *_common.facts_table(facts),
        "",
        f"## Uncontended acquire + release (one process; best of {args.rounds} interleaved "
        f"rounds of {args.seconds:g} s)",
        "",
        "vs floor: the lock's cycles/s over the raw floor's (the least the store can do per "
        "cycle); vs tenure: over tenure's on the same store, above 1 is faster than tenure; "
        "requests: sent per cycle, counted by the client (etcd: HTTP requests to the JSON "
        "gateway; ZooKeeper: kazoo's requests, pings excluded). ZooKeeper's rounds go to "
        "one member each, in turn, every lock of a round connected to the same member: a "
        "session on the leader cycles about twice as fast as one on a follower, and a client "
        "given the whole list picks a member at random.",
        "",
    ]
    rows = []
    for store in args.stores:
        floor = rates[store, "raw floor"][0]
        ours = rates[store, "tenure"][0]
        for kind in KINDS:
            rate = rates[store, kind][0]
            rows.append([label(store, kind), f"{rate:,.0f}", f"{1e3 / rate:,.2f}",
                         f"{rate / floor:.2f}x", f"{rate / ours:.2f}x",
                         f"{per_cycle(tallies[store, kind, 'uncontended']):.2f}"])
    lines += _common.table(
        ["lock", "cycles/s", "ms per cycle", "vs floor", "vs tenure", "requests"], rows
    )
    lines += [
        "",
        "What each cycle sends:",
        "- etcd raw floor: 2 requests (a create-if-absent txn, a deleterange). No lease, "
        "fence or holder record: what a lock that cannot expire would cost.",
        "- etcd tenure: one txn writing the holder key (only into an empty range) on a lease "
        "granted ahead (the previous holder's, kept alive by this process and reused while "
        "it still lasts the whole ttl: every ~1 s a keep-alive first, as leases are the "
        "smallest whole seconds above the ttl) and the name's last fence (for `inspect`, on "
        "the lease of `gc_after`); on release a delete of the key by its name: 2 requests. "
        "The key's name is this client's, the same cycle after cycle (as the lock service's "
        "is its lease's), so the name's range holds no trail of deleted keys for the next "
        "compare to walk.",
        "- etcd lock service: `lock` (the server writes a key on the session's lease and "
        "waits for the keys ahead) and `unlock` (a delete): 2 requests, the lease granted "
        "once for the whole run. No fence is returned to the caller (the key's revision "
        "is, if one reads it) and no record of who holds it.",
        "- ZooKeeper raw floor: create (ephemeral sequential) + delete: 2 requests.",
        "- ZooKeeper tenure: create (with its stat) and list the children, sent together (one "
        "wait); on release one multi: a write whose stat gives the server's time for the ttl "
        "rule (the name's last fence, else a clock node) and the delete: 3 requests, 2 waits "
        "in a row.",
        "- kazoo Lock: create, list the children (its own node is alone: no watch), and on "
        "release a delete (plus its checks for a node left by an earlier lost reply).",
        "",
        f"## Handoff ({args.processes} processes, one lock, {args.handoffs} handoffs each)",
        "",
        "From the holder's release (stamped just before the call) to the next holder's "
        "acquire returning; every other process is already blocked in acquire. vs tenure: "
        "tenure's p50 over the lock's, above 1 is faster than tenure; requests: every "
        "process's requests (waits, keep-alives and watches included) over the acquisitions; "
        "overlaps: acquires that returned while another process was inside the lock.",
        "",
    ]
    rows = []
    for store in args.stores:
        ours = _common.ms(latencies[store, "tenure"], 0.5)
        for kind in ("tenure", "native"):
            values = latencies[store, kind]
            p50 = _common.ms(values, 0.5)
            tally = tallies[store, kind, "handoff"]
            rows.append([label(store, kind), f"{p50:.2f}", f"{_common.ms(values, 0.99):.2f}",
                         f"{ours / p50:.2f}x", str(len(values)), f"{per_cycle(tally):.2f}",
                         str(tally[2])])
    lines += _common.table(
        ["lock", "p50 ms", "p99 ms", "vs tenure", "handoffs", "requests", "overlaps"], rows
    )
    lines += [
        "",
        "Waiting: all four are queues, each waiter watching the key or node just ahead of its "
        "own, so a release wakes exactly the next waiter. tenure's etcd waiter watches puts "
        "and deletes of the key just ahead, whose record it read: once that key was written "
        "as a holder's (a grant, which had no older key, and none can appear), its deletion "
        "makes the waiter first without a request. Its key, still on its short queue lease "
        "(2 s, kept alive while it waits), holds the lock at the head, so it takes the lock "
        "at once: the one txn that moves the key onto the lease of its ttl and records the "
        "fence goes out without waiting for its answer (`check()` doubts the lease if that "
        "answer is late; release, renewal and `owned()` wait for it). A handoff is thus the "
        "release's delete and nothing the next holder waits for, as the lock service's; a "
        "deletion of a key not known granted, or a quiet wait, is followed by a read (never a "
        "refused write). Between two waits "
        "an etcd waiter sends a keep-alive of its two leases, and a read of the key ahead when "
        "no step just read it (the requests column counts them, and the move). tenure's "
        "ZooKeeper waiter sets its watch by reading the node ahead (again at each write of "
        "it), so it sees that node granted; once a granted node goes, the waiter behind it is "
        "first without listing the queue. Its place (a 2 s lease, rewritten at each wait) "
        "holds the lock at the head, so it takes the lock at once: the one multi that makes "
        "its node the holder's, with its ttl, and writes the fence goes out without waiting "
        "for its answer (`check()` doubts the lease if that answer is late; release, renewal "
        "and `owned()` wait for it). A handoff is thus the release's multi and nothing the "
        "next holder waits for, where kazoo's woken waiter lists the children. A blocking "
        "first try keeps its refused node as its place; between two waits a tenure waiter "
        "rewrites its node and lists the queue in one round trip, reads the node ahead and "
        "watches it (the requests column counts them); kazoo's waiters send nothing. Each "
        "wait is bounded (0.5 s) and re-checked, so a missed watch event costs at most that.",
        "",
    ]
    return "\n".join(lines)


def stores_option(text: str) -> tuple[str, ...]:
    """``--stores``: the stores named, in the order of ``STORES``."""
    named = {part.strip() for part in text.split(",") if part.strip()}
    unknown = named - set(STORES)
    if unknown or not named:
        raise argparse.ArgumentTypeError(
            f"not a store: {', '.join(sorted(unknown)) or text!r} (stores: {', '.join(STORES)})")
    return tuple(store for store in STORES if store in named)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--handoffs", type=int, default=60)
    parser.add_argument("--processes", type=int, default=8)
    parser.add_argument("--stores", type=stores_option, default=STORES,
                        help="comma-separated, of: " + ", ".join(STORES))
    parser.add_argument("--no-write", dest="write", action="store_false")
    args = parser.parse_args()
    stores: tuple[str, ...] = args.stores
    # SIGTERM (a timeout, a kill by PID) unwinds like Ctrl-C: the clusters are stopped.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    import httpx
    import kazoo

    facts = _common.machine(load_average=True)
    context = multiprocessing.get_context("spawn")
    with servers(stores) as urls:
        if "etcd" in stores:
            facts["etcd"] = f"{etcd_version()} (3 members, JSON gateway)"
        if "zookeeper" in stores:
            facts["zookeeper"] = f"{zookeeper_version(int(urls['zookeeper-port']))} (3 members)"
        facts["tenure"] = _common.version("tenure")
        facts["httpx"] = httpx.__version__
        facts["kazoo"] = getattr(kazoo, "__version__", _common.version("kazoo"))
        _common.print_facts(facts)
        width = max(len(label(store, kind)) for store in stores for kind in KINDS)

        tallies = {(store, kind, phase): context.Array("q", len(TALLY))
                   for store in stores for kind in KINDS for phase in ("uncontended", "handoff")}
        runs: dict[str, Callable[[], tuple[float, int]]] = {}
        for store in stores:
            for kind in KINDS:
                runs[label(store, kind)] = functools.partial(
                    uncontended_round, store, kind, round_urls(store, urls),
                    f"bench-{secrets.token_hex(4)}", tallies[store, kind, "uncontended"],
                    args.seconds)
        if "zookeeper" in stores:
            # Every member in turn, so that each lock also meets the leader (the report
            # says how many rounds ran).
            args.rounds = max(args.rounds, len(urls["zookeeper-members"].split()))
        by_label = _common.best_of_rounds(runs, args.rounds)
        rates = {(store, kind): by_label[label(store, kind)]
                 for store in stores for kind in KINDS}
        for (store, kind), (rate, cycles) in rates.items():
            print(f"uncontended {label(store, kind):<{width}} {rate:8,.0f} cycles/s "
                  f"({cycles} cycles, "
                  f"{per_cycle(tallies[store, kind, 'uncontended']):.2f} requests each)",
                  flush=True)

        factories = {
            (store, kind): factory(store, kind, urls[store], f"handoff-{secrets.token_hex(4)}",
                                   tallies[store, kind, "handoff"])
            for store in stores for kind in ("tenure", "native")
        }
        by_label_latency: dict[str, list[int]] = {}
        for (store, kind), lock in factories.items():
            name = label(store, kind)
            started = time.perf_counter()
            values = _common.handoff(context, lock, args.handoffs + 1, processes=args.processes)
            by_label_latency[name] = values
            tally = tallies[store, kind, "handoff"]
            print(f"handoff     {name:<{width}} p50 {_common.ms(values, 0.5):7.2f} ms  "
                  f"p99 {_common.ms(values, 0.99):7.2f} ms  ({len(values)} handoffs, "
                  f"{per_cycle(tally):.2f} requests per acquisition, {tally[2]} overlaps, "
                  f"{time.perf_counter() - started:.1f} s)", flush=True)
        latencies = {(store, kind): by_label_latency[label(store, kind)]
                     for store in stores for kind in ("tenure", "native")}

    _common.publish(report(facts, rates, latencies, tallies, args),
                    ROOT / "docs" / "benchmarks-consensus.md", ROOT, args.write)


if __name__ == "__main__":
    main()
