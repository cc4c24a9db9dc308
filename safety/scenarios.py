"""The scenarios, the backends each applies to (and why not elsewhere), two profiles.

A scenario drives worker processes against one backend, then turns the recorded history into
``Result``s with ``safety.checker``. ``violations`` lists every safety property that failed:
an empty list is a pass. Figures that demonstrate a limit rather than test a promise (the
overlaps a paused holder causes, stale writes a resource without a fence check accepts) are
reported, not judged.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import functools
import importlib
import random
import signal
import threading
import time
import traceback
import urllib.parse
from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

from tests.backends import row
from tests.timing import scaled

import tenure
from safety.checker import Figures, check, check_races, write_fence_regressions
from safety.control import Run, Target, WorkerFailed, WorkerProcess
from safety.history import History, Section, now_ns
from safety.linearizable import certain_overlaps, checked
from safety.proxy import Mode, Proxy
from safety.resource import Resource
from tenure._sync.connect import store_class
from tenure.verify import describe_violation

__all__ = [
    "PROFILES",
    "SCENARIOS",
    "TRAITS",
    "Profile",
    "Result",
    "Scenario",
    "Traits",
    "applicable",
    "run_scenario",
]


# ---- profiles ------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Profile:
    name: str
    baseline_processes: int
    baseline_sections: int
    counter_processes: int
    counter_sections: int
    pause_trials: int
    """Per variant (lease only, fence checked)."""
    pause_ttl: float
    pause_contenders: int
    kill_trials: int
    kill_ttl: float
    kill_lanes: int
    """Trials run this many at a time, each lane on its own lock."""
    restart_trials: int
    restart_ttl: float
    restart_processes: int
    cut_trials: int
    """Per mode (blackhole, reset)."""
    cut_ttl: float
    cut_operation_timeout: float | None
    """Configure the backend's per-operation timeout to this (None: its default)."""
    cancel_count: int
    cancel_ttl: float
    race_rounds: int
    race_processes: int
    race_threads: int
    fuzz_examples: int
    clock_trials: int
    clock_ttl: float
    node_processes: int
    node_sections: int
    """Per variant (a follower stopped, the leader stopped)."""
    semaphore_processes: int
    semaphore_sections: int
    semaphore_pause_trials: int
    semaphore_kill_trials: int
    failover_trials: int
    """Sentinel failovers, one after another on one set-up."""
    failover_ttl: float
    failover_processes: int
    cleanup_sections: int
    """Sections of scenario 14, most of them after the name's record was cleaned up."""
    cleanup_processes: int
    rwlock_processes: int
    rwlock_sections: int
    rwlock_pause_trials: int
    rwlock_kill_trials: int
    election_processes: int
    election_terms: int
    election_pause_trials: int
    election_kill_trials: int
    weighted_processes: int
    weighted_sections: int
    weighted_kill_trials: int


PROFILES = {
    "quick": Profile(
        name="quick",
        baseline_processes=4, baseline_sections=300,
        counter_processes=4, counter_sections=200,
        pause_trials=1, pause_ttl=1.0, pause_contenders=2,
        kill_trials=10, kill_ttl=0.5, kill_lanes=2,
        restart_trials=1, restart_ttl=0.5, restart_processes=2,
        cut_trials=1, cut_ttl=1.0, cut_operation_timeout=1.0,
        cancel_count=50, cancel_ttl=0.5,
        race_rounds=20, race_processes=4, race_threads=4,
        fuzz_examples=80,
        clock_trials=1, clock_ttl=1.0,
        node_processes=4, node_sections=120,
        semaphore_processes=4, semaphore_sections=200, semaphore_pause_trials=1,
        semaphore_kill_trials=6,
        failover_trials=1, failover_ttl=3.0, failover_processes=4,
        cleanup_sections=24, cleanup_processes=2,
        rwlock_processes=4, rwlock_sections=200, rwlock_pause_trials=1, rwlock_kill_trials=6,
        election_processes=4, election_terms=150, election_pause_trials=1,
        election_kill_trials=6,
        weighted_processes=6, weighted_sections=240, weighted_kill_trials=6,
    ),
    "full": Profile(
        name="full",
        baseline_processes=16, baseline_sections=10_000,
        counter_processes=16, counter_sections=10_000,
        pause_trials=20, pause_ttl=1.0, pause_contenders=3,
        kill_trials=200, kill_ttl=1.0, kill_lanes=4,
        restart_trials=5, restart_ttl=2.0, restart_processes=3,
        cut_trials=5, cut_ttl=1.0, cut_operation_timeout=None,
        cancel_count=400, cancel_ttl=1.0,
        race_rounds=1000, race_processes=8, race_threads=8,
        fuzz_examples=1000,
        clock_trials=10, clock_ttl=1.0,
        node_processes=8, node_sections=4000,
        semaphore_processes=16, semaphore_sections=4000, semaphore_pause_trials=20,
        semaphore_kill_trials=100,
        failover_trials=5, failover_ttl=5.0, failover_processes=8,
        cleanup_sections=300, cleanup_processes=3,
        rwlock_processes=16, rwlock_sections=4000, rwlock_pause_trials=20,
        rwlock_kill_trials=100,
        election_processes=16, election_terms=4000, election_pause_trials=20,
        election_kill_trials=100,
        weighted_processes=16, weighted_sections=4000, weighted_kill_trials=100,
    ),
}


# ---- results -------------------------------------------------------------------------------


@dataclasses.dataclass
class Result:
    scenario: int
    title: str
    variant: str
    backend: str
    runs: int
    """Trials, rounds, cancellations or examples (1 for one long run)."""
    sections: int
    """Critical sections completed (acquisitions, for scenarios without a section body)."""
    overlaps: int | None
    stale_writes_accepted: int | None
    worst_recovery: float | None
    """Seconds; what "recovery" means is in ``recovery_meaning``."""
    recovery_bound: float | None
    recovery_meaning: str = ""
    details: dict[str, Any] = dataclasses.field(default_factory=dict)
    violations: list[str] = dataclasses.field(default_factory=list)
    seconds: float = 0.0

    @property
    def passed(self) -> bool:
        return not self.violations

    @property
    def label(self) -> str:
        return f"{self.scenario}. {self.title}" + (f" ({self.variant})" if self.variant else "")


# ---- which backend gets which scenario -----------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Traits:
    """What the harness can do with a backend; each None means "yes", a string says why not."""

    shared: str | None = None
    """Separate worker processes share its locks."""
    restart: str | None = None
    """It has a server the harness can restart in place."""
    proxy: str | None = None
    """Its clients talk to one TCP endpoint that a proxy can stand in front of."""
    split_votes: str | None = None
    """Why a round of one-shot attempts may end with no winner (None: it never may)."""
    clock: str | None = None
    """Some wall clock of its processes can be moved (``safety.clock``): its servers' or its
    clients'."""
    nodes: str | None = ("one server holds every lease: stopping it is a restart (scenario 5) "
                         "or a cut (scenario 6), not the loss of one replica")
    """Its store is replicated over nodes that elect a leader, one of which the harness can
    stop while the others keep a quorum."""
    semaphore: str | None = None
    """It offers semaphores (the refusal of those that do not is their own reason)."""
    failover: str | None = ("one server, no replica: the harness runs no failover of it (a "
                            "stop is scenario 5)")
    """Its server has a replica that an outside watcher (Redis Sentinel) promotes when the
    primary dies, and clients follow the promotion."""
    cleanup: str | None = None
    """It removes the record of a name idle for ``gc_after`` promptly enough to watch."""
    rwlock: str | None = None
    """It offers read-write locks (the refusal of those that do not is their own reason)."""
    election: str | None = None
    """It offers leader elections: read from the backend itself by ``traits``."""
    weighted: str | None = None
    """It offers weighted FIFO permits (``supports("weighted")``): read from the backend
    itself by ``traits``."""


TRAITS: dict[str, Traits] = {
    "redis": Traits(failover=None),
    "memory": Traits(
        shared="one store per process: separate worker processes cannot share a lock",
        restart="no server: the store lives and dies with its process",
        proxy="no connection to cut: the store is in the process",
        clock="expiry is judged by the process's monotonic clock, which a wall-clock jump "
        "does not move",
    ),
    "sqlite": Traits(
        restart="no server to restart: every process opens the database file itself (a "
        "holder dying with its process is scenario 4; the file keeps fences across process "
        "restarts)",
        proxy="no network connection to cut: processes open the file directly",
        nodes="one database file, no replicas",
        failover="one database file, no replicas",
    ),
    "redis_cluster": Traits(
        nodes="each slot lives on one primary without a replica here: stopping it is the "
        "restart of scenario 5 (replica failover is not run)",
        failover="its test cluster has no replicas: a Cluster's own failover is not run",
        proxy="cluster clients follow MOVED redirects to each node's announced address, "
        "around a single proxy",
    ),
    "redlock": Traits(
        nodes="independent nodes without a leader: a minority of them restarted is a variant "
        "of scenario 5, cut from the client one of scenario 6",
        failover="independent nodes without replicas: losing one is scenario 5's minority "
        "restart",
        semaphore="Redlock refuses semaphores: counting permits on each independent node and "
        "taking a majority could grant more permits than the limit",
        rwlock="Redlock refuses read-write locks: the queue that keeps readers from starving "
        "a writer needs one arrival order, which independent nodes do not have, and per-node "
        "counters cannot make a write's fence exceed every earlier read's",
        cleanup="each node keeps a name's record forever: its per-node counters are what "
        "orders Redlock fences (gc_after does not apply)",
        split_votes="a lock is granted by a majority of nodes: when simultaneous attempts "
        "split the nodes between them so that none has a majority, every one of them fails "
        "and gives its nodes back (a blocking acquire then retries after a random pause)",
    ),
}


for _ensemble in ("etcd", "zookeeper"):
    TRAITS[_ensemble] = Traits(
        nodes=None,
        failover="a quorum elects the leader itself: its loss is scenario 11",
        clock="not run yet: moving one node's wall clock under a JVM or Go runtime is not "
        "verified to take",
        cleanup="no record outlives a name's leases: its keys (nodes) go with the last of "
        "them, and fences are the store's own revisions, which never go back",
    )
TRAITS["mongodb"] = Traits(
    cleanup="MongoDB's TTL monitor deletes expired documents once a minute, not promptly; "
    "the fence floor that keeps fences from going back after it is checked by the "
    "integration tests, which delete documents themselves",
)


def traits(backend: str) -> Traits:
    found = TRAITS.get(backend, Traits())
    refused = _offer_refusal(backend, "election", "it has no elections yet: no lease values "
                             "are stored with its locks' leases")
    if refused is not None:
        found = dataclasses.replace(found, election=refused)
    # A backend without semaphores has no weighted permits for the same reason.
    refused = found.semaphore or _offer_refusal(
        backend, "weighted", "it has no weighted permits yet: its store does not offer "
        "\"weighted\" (supports(\"weighted\") is False)")
    if refused is not None and found.weighted is None:
        found = dataclasses.replace(found, weighted=refused)
    return found


def _offer_refusal(backend: str, offer: str, missing: str) -> str | None:
    """Why ``backend`` does not offer ``offer`` (its own refusal, else ``missing``), None if
    it does: read from what its store offers, so that a backend gaining elections or
    weighted permits gains scenario 16 or 17 without an edit here."""
    try:
        module = importlib.import_module(f"tenure.backends.{row(backend).package}._sync")
    except ImportError as exc:
        return f"its backend module does not load here: {exc}"
    store = store_class(module.BACKEND)
    if offer in store.offers:
        return None
    return store.refusals.get(offer, missing)


# ---- helpers -------------------------------------------------------------------------------


RW_SIDES = ["read", "write"]
"""The sides a contender of a read-write lock picks from, at random, section by section."""


def _split(total: int, parts: int) -> list[int]:
    return [total // parts + (1 if i < total % parts else 0) for i in range(parts)]


def _capabilities(url: str) -> tenure.Capabilities:
    with tenure.connect(url) as locks:
        return locks.capabilities


def _common_violations(figures: Figures, backend: str, *, overlaps_allowed: bool,
                       fences_promised: bool = True) -> list[str]:
    found = []
    if figures.overlaps and not overlaps_allowed:
        found.append(f"{figures.overlaps} overlapping critical sections "
                     f"({figures.overlap_pairs} pairs)")
    if figures.silent_overlaps:
        found.append(f"{figures.silent_overlaps} overlaps whose stale holder was never told "
                     "(lost unset, clean release)")
    if figures.fence_regressions and fences_promised:
        found.append(f"{figures.fence_regressions} fences repeated or went back")
    if figures.write_fence_regressions and fences_promised:
        found.append(f"{figures.write_fence_regressions} writes whose fence was not above "
                     "every fence of a section that ended before they began")
    return found


def _ready(*workers: WorkerProcess) -> None:
    for worker in workers:
        report = worker.expect(90)
        if not report.get("ready"):
            raise WorkerFailed(f"{worker}: expected ready, got {report}")


def _figures_details(figures: Figures) -> dict[str, Any]:
    return {k: v for k, v in dataclasses.asdict(figures).items() if v is not None}


# ---- 1. baseline -----------------------------------------------------------------------------

STALL = 120.0
"""Seconds a worker of the long scenarios may go without recording a section before it counts
as hung (an acquire waits 60 s at most): their length depends on the backend's speed."""



CONTENDED_TTL = 10.0
"""The ttl of every lease of the contended runs (``_contended``, lost updates): long enough
that none runs out while its holder works, so any overlap is the store's."""


def baseline(run: Run, profile: Profile) -> list[Result]:
    processes = profile.baseline_processes
    figures, violations = _contended(run, processes, profile.baseline_sections,
                                     hold=[0, 0.002])
    return [Result(1, "Baseline", "", run.target.backend, 1, figures.sections, figures.overlaps,
                   None, None, None,
                   details={"processes": processes, "ttl": CONTENDED_TTL,
                            **_figures_details(figures)},
                   violations=violations)]


def _contended(run: Run, processes: int, total: int, *, hold: list[float],
               limit: int | None = None, rw: bool = False, election: bool = False,
               weights: list[int] | None = None, threads: int | None = None
               ) -> tuple[Figures, list[str]]:
    """``processes`` workers share ``total`` sections of one lock (or of one semaphore of
    ``limit`` permits; or, with ``rw``, of one read-write lock, each section a read or a
    write at random; or, with ``election``, terms of one election, each a campaign won and
    resigned; or, with ``weights``, permits of ``limit`` units, each of a weight picked at
    random among them) in random acquire styles, holds and pauses; nothing may exceed it.
    Weighted permits are not given to tenure verify's checker: its model has no weights.
    ``threads``: each worker runs that many loops on threads of its own, one client between
    them (a store that lives in its process: memory://)."""
    name = run.name("baseline")
    # A healthy server may still miss a deadline on a loaded machine (a Redlock node's
    # socket timeout once did, under a load of 30): the worker records the BackendError
    # and tries again, and the run fails only when errors are more than a rare hiccup.
    workers = [
        run.spawn("sections", name=name, count=share, ttl=CONTENDED_TTL, acquire_timeout=60.0,
                  modes=["blocking", "try", "with"], hold=hold, think=[0, 0.001], limit=limit,
                  rw=RW_SIDES if rw else None, election=election, weights=weights,
                  threads=threads, tolerate_errors=True)
        for share in _split(total, processes)
    ]
    _ready(*workers)
    for worker in workers:
        worker.expect_progressing(stall=STALL)
    history = run.history()
    figures = check(history, limit or 1)
    violations = _common_violations(figures, run.target.backend, overlaps_allowed=False)
    primitive = "rwlock" if rw else "election" if election else None
    if weights is None:
        figures, violations = _verdict(history, figures, violations, ttl=CONTENDED_TTL,
                                       limit=limit or 1, primitive=primitive, expected=True)
    if figures.sections != total:
        violations.append(f"{figures.sections} sections recorded, {total} expected")
    errors = history.events_named("backend-error")
    if len(errors) > total // 50:
        violations.append(f"{len(errors)} BackendErrors from a healthy server in {total} "
                          f"sections, the first: {errors[0].data['error']}")
    return figures, violations


def _verdict(history: History, figures: Figures, violations: list[str], *, ttl: float,
             expected: bool | None, limit: int = 1, primitive: str | None = None
             ) -> tuple[Figures, list[str]]:
    """``figures`` with tenure verify's verdict on ``history`` (``safety.linearizable``), and
    ``violations`` with one more when it is not the ``expected`` one: linearizable (True), or,
    where the scenario breaks what the backend promises, not linearizable (False); None:
    recorded, expecting neither. A search out of time ("unknown") is reported, not failed."""
    verdict = checked(history, ttl=ttl, limit=limit, primitive=primitive)
    figures = dataclasses.replace(figures, linearizable=verdict.summary())
    if verdict.linearizable is None:
        return figures, violations
    if expected and verdict.violations:
        violations = [*violations, f"tenure verify's checker: {verdict.summary()}\n"
                      + describe_violation(verdict.violations[0])]
    elif expected is False and verdict.linearizable:
        violations = [*violations, "tenure verify's checker found this history linearizable, "
                      "though the scenario breaks the backend's promise: "
                      + verdict.summary()]
    return figures, violations


# ---- 2. lost updates -------------------------------------------------------------------------


def lost_updates(run: Run, profile: Profile) -> list[Result]:
    total, processes = profile.counter_sections, profile.counter_processes
    name = run.name("counter")
    resource = Resource(run.workdir, fenced=False).start()
    try:
        workers = [
            run.spawn("sections", name=name, count=share, ttl=CONTENDED_TTL, acquire_timeout=60.0,
                      resource=str(resource.path), hold=[0, 0.001])
            for share in _split(total, processes)
        ]
        _ready(*workers)
        for worker in workers:
            worker.expect_progressing(stall=STALL)
    finally:
        resource.stop()
    history = run.history()
    figures = check(history)
    violations = _common_violations(figures, run.target.backend, overlaps_allowed=False)
    figures, violations = _verdict(history, figures, violations, ttl=CONTENDED_TTL, expected=True)
    if figures.lost_updates:
        violations.append(f"{figures.lost_updates} updates lost: the counter reads "
                          f"{figures.final_value} after {figures.writes_accepted} increments")
    if figures.writes_accepted != total:
        violations.append(f"{figures.writes_accepted} increments completed, {total} expected")
    return [Result(2, "Lost updates", "read, sleep, write", run.target.backend, 1,
                   figures.sections, figures.overlaps, figures.stale_writes_accepted, None, None,
                   details={"processes": processes, **_figures_details(figures)},
                   violations=violations)]


# ---- 3. the paused holder --------------------------------------------------------------------


def paused_holder(run: Run, profile: Profile) -> list[Result]:
    return [
        _paused(run.child("lease-only"), profile, fenced=False),
        _paused(run.child("fenced"), profile, fenced=True),
    ]


@dataclasses.dataclass
class _Disturbed:
    """What a run of victims disturbed inside their sections left: the checked history, the
    victims' reports after each disturbance, how many of them were told of their loss, and
    what went wrong in the harness."""

    figures: Figures
    reports: list[dict[str, Any]]
    violations: list[str]
    retaken: int = 0
    """Sections taken again because they were not ``disturbable``."""

    @property
    def told(self) -> int:
        return sum(bool(done["lost"] or done["release"] != "ok") for done in self.reports)


RETAKES = 20
"""How many sections in a row a trial of ``_disturbed`` may find not ``disturbable``."""


def _disturbed(run: Run, *, ttl: float, trials: int, contenders: int, fenced: bool,
               disturb: Callable[[WorkerProcess], None], limit: int | None = None,
               rw: bool = False, election: bool = False,
               successor_wait: float = 0.0,
               disturbable: Callable[[str], bool] | None = None) -> _Disturbed:
    """Contenders take the lock in short sections while, ``trials`` times, a victim acquires
    it, reads the resource, is disturbed by ``disturb`` inside its section, then writes and
    releases: scenario 3 pauses it, scenario 10 jumps a clock under it. With ``limit`` they
    take permits of a semaphore instead, and there is no resource: its holders rightly write
    side by side, so only the concurrency and what the victim is told are judged. With ``rw``
    the lock is a read-write lock: the victim is a writer, the contenders read or write at
    random, and there is no resource either (its readers would write side by side). With
    ``election`` everyone campaigns on an election of the name instead: the victim is a
    leader, and leaders write the resource as a mutex's holders do. ``successor_wait``: after
    the disturbance, wait up to this long for a successor's fence to reach the resource
    before the victim writes, so that its write is surely the stale one (on a loaded machine
    the successor may not have entered yet when the disturbance ends). ``disturbable``: given
    the lock's name, whether the victim's section may be disturbed now; if not, the victim
    writes and releases undisturbed and acquires again (up to ``RETAKES`` times a trial)."""
    name = run.name("victim")
    shared = limit is not None or rw
    resource = Resource(run.workdir, fenced=fenced).start() if not shared else None
    path = str(resource.path) if resource is not None else None
    violations: list[str] = []
    reports = []
    retaken = 0
    try:
        workers = [
            run.spawn("sections", name=name, ttl=ttl, renew=True, acquire_timeout=ttl * 10,
                      resource=path, hold=[0.005, 0.02], think=[0.005, 0.02], limit=limit,
                      rw=RW_SIDES if rw else None, election=election)
            for _ in range(contenders)
        ]
        victim = run.spawn("victim", name=name, ttl=ttl, resource=path, limit=limit,
                           rw=["write"] if rw else None, election=election)
        with run.stopping(*workers, victim):
            _ready(*workers, victim)
            for _ in range(trials):
                for _ in range(RETAKES):
                    victim.send("go")
                    entered = victim.expect(60)
                    if entered.get("lapsed"):
                        # Its lease ran out before the disturbance (the victim was told and
                        # released): a section for nothing, taken again.
                        retaken += 1
                        continue
                    if not entered.get("entered") or disturbable is None or disturbable(name):
                        break
                    retaken += 1
                    victim.send("write")
                    victim.expect(60)
                else:
                    violations.append(f"{RETAKES} sections in a row were not for disturbing")
                    continue
                if not entered.get("entered"):
                    violations.append("the victim could not acquire the lock")
                    continue
                disturb(victim)
                if resource is not None and successor_wait > 0:
                    victim_fence = int(entered.get("fence") or 0)
                    deadline = time.monotonic() + successor_wait
                    while (resource.latest_fence() <= victim_fence
                           and time.monotonic() < deadline):
                        time.sleep(0.02)
                victim.send("write")
                reports.append({**victim.expect(60), "received": time.time()})
            victim.send("quit")
    finally:
        if resource is not None:
            resource.stop()
    figures = check(run.history(), limit or 1)
    if fenced:
        if figures.stale_writes_accepted:
            violations.append(f"{figures.stale_writes_accepted} stale writes accepted "
                              "despite the fence check")
        if figures.lost_updates:
            violations.append(f"{figures.lost_updates} updates lost despite the fence check")
    return _Disturbed(figures, reports, violations, retaken)


def _paused(run: Run, profile: Profile, *, fenced: bool) -> Result:
    # As scenarios 12, 15 and 16: the pause outlasts the lease on the server too (etcd's
    # whole-second leases may end up to lease_overrun after the ttl).
    overrun = _capabilities(run.target.url).lease_overrun
    found = _pause_trials(run, profile.pause_trials, profile.pause_ttl,
                          profile.pause_contenders, fenced=fenced, overrun=overrun)
    variant = "fence checked by the resource" if fenced else "lease only, no fence check"
    return Result(3, "Holder paused 1.5x TTL", variant, run.target.backend,
                  profile.pause_trials, found.figures.sections, found.figures.overlaps,
                  found.figures.stale_writes_accepted, None, None,
                  details=_pause_details(found, profile.pause_ttl, profile.pause_contenders,
                                         overrun),
                  violations=found.violations)


def _pause_trials(run: Run, trials: int, ttl: float, contenders: int, *, fenced: bool,
                  limit: int | None = None, rw: bool = False, election: bool = False,
                  overrun: float = 0.0) -> _Disturbed:
    """Victims SIGSTOPped for 1.5x their TTL inside their sections, contenders going on
    (``limit``, ``rw``, ``election``: as ``_disturbed``). ``overrun``: seconds added to the
    pause, the most a lease may outlive its ttl on the backend's server
    (``Capabilities.lease_overrun``), so that the lease surely ends during the pause.

    On a loaded machine the contenders may not get in within that pause; the victim then
    stays stopped until their sections show its place taken (``_taken_over``), for at most
    ``PAUSE_MOST_TTLS`` ttls, so that a trial tests what it is meant to instead of failing
    the "nothing was tested" guard below."""
    least = 1.5 * ttl + overrun
    most = PAUSE_MOST_TTLS * ttl + overrun

    def pause_victim(victim: WorkerProcess) -> None:
        victim.signal(signal.SIGSTOP)
        stopped = now_ns()
        run.recorder.event("sigstop", victim.worker, seconds=least)
        time.sleep(least)
        deadline = time.monotonic() + most - least
        while (not _taken_over(run.history(), victim.worker, stopped, limit or 1)
               and time.monotonic() < deadline):
            time.sleep(0.05)
        victim.signal(signal.SIGCONT)
        run.recorder.event("sigcont", victim.worker, seconds=(now_ns() - stopped) / 1e9)

    found = _disturbed(run, ttl=ttl, trials=trials, contenders=contenders, fenced=fenced,
                       disturb=pause_victim, limit=limit, rw=rw, election=election)
    found.violations += _common_violations(found.figures, run.target.backend,
                                           overlaps_allowed=True)
    if not found.figures.overlaps:
        found.violations.append("no other holder entered during any pause: nothing was "
                                "tested")
    return found


PAUSE_MOST_TTLS = 20.0
"""The longest a paused victim waits, in ttls, for the contenders to take its place."""


def _taken_over(history: History, victim: str, since: int, limit: int) -> bool:
    """Whether the other workers' sections that began after ``since`` were, at some
    instant, ``limit`` at once: with the stopped victim still inside its own section, its
    place (its permit, or the lock) has been taken. The victim's own section is recorded
    only when it ends, so the check reads the others'."""
    changes = sorted(
        change
        for section in history.sections
        if section.worker != victim and section.start >= since
        for change in ((section.start, 1), (section.end, -1))
    )
    inside = 0
    for _, step in changes:
        inside += step
        if inside >= limit:
            return True
    return False


def _pause_details(found: _Disturbed, ttl: float, contenders: int,
                   overrun: float = 0.0) -> dict[str, Any]:
    return {"ttl": ttl, "pause": 1.5 * ttl + overrun, "contenders": contenders,
            "victims_told_of_loss": found.told, **_figures_details(found.figures)}


# ---- 4. the killed holder --------------------------------------------------------------------


def killed_holder(run: Run, profile: Profile) -> list[Result]:
    found = _kill_trials(run, profile.kill_trials, profile.kill_ttl, profile.kill_lanes)
    return [Result(4, "Holder killed (SIGKILL)", "", run.target.backend, len(found.recoveries),
                   found.figures.sections, found.figures.overlaps, None,
                   max(found.recoveries) if found.recoveries else None, found.bound,
                   KILL_RECOVERY, details=found.details, violations=found.violations)]


KILL_RECOVERY = "SIGKILL to the next acquisition; bound ttl + ttl/3 + 1 s"

FILLER_TTL = 30.0
"""The lease of the processes that hold a semaphore's other permits while its killed
holder's permit is timed (seconds)."""


@dataclasses.dataclass
class _Killed:
    figures: Figures
    recoveries: list[float]
    bound: float
    details: dict[str, Any]
    violations: list[str]


def _kill_trials(run: Run, trials: int, ttl: float, lanes: int, *,
                 limit: int | None = None, rw: bool = False, election: bool = False,
                 overrun: float = 0.0,
                 weights: tuple[int, list[int], int] | None = None) -> _Killed:
    """In each lane, on a lock of its own, holders are SIGKILLed at a random point of their
    renewal cycle while a waiter waits; the waiter's acquisition times the recovery. With
    ``limit`` the lanes use a semaphore whose other ``limit - 1`` permits are held all along
    by fillers, so the waiter can only have the killed holder's permit. With ``rw`` they use
    a read-write lock: the holders write, the waiter reads or writes at random (either must
    wait for a writer). With ``election`` the holders are leaders and the waiter campaigns:
    its win times the new leader. ``overrun``: seconds the backend declares its leases may
    outlive their ttl on the server (``Capabilities.lease_overrun``), added to the bound.
    ``weights`` (with ``limit``: a weighted semaphore, scenario 17): the holders' weight,
    the fillers' (one filler each, their units with the holder's making ``limit``) and the
    waiter's (no more than the holder's units, and more than the units left beside the
    holder's, so that only the killed holder's units let it in)."""
    holder_sides = ["write"] if rw else None
    holder_weight: int | None = None
    waiter_weight: int | None = None
    filler_weights: list[int | None] = [None] * ((limit or 1) - 1)
    if weights is not None:
        holder_weight, waiter_weight = weights[0], weights[2]
        filler_weights = list(weights[1])
    # The second of slack is an idle machine's: each trial stretches it by the load at its
    # kill (tests.timing), as a waiter's wake-up and its process's turn on a core take longer
    # on a loaded one. ``bound`` is the idle figure the docs print.
    bound = ttl + ttl / 3 + 1.0 + overrun
    lanes = max(1, min(lanes, trials))
    recoveries: list[float] = []
    late: list[tuple[float, float]] = []  # (recovery, that trial's bound) over it
    bounds = [bound]  # each trial's, stretched
    violations: list[str] = []
    failures: list[BaseException] = []

    def lane(number: int, trials: int) -> None:
        rng = random.Random(run.seed * 100 + number)
        name = run.name(f"killed{number}")
        waiter = run.spawn("waiter", name=name, ttl=ttl, acquire_timeout=bound + 10,
                           limit=limit, rw=RW_SIDES if rw else None, election=election,
                           weight=waiter_weight)
        upcoming = run.spawn("holder", name=name, ttl=ttl, worker=f"holder{number}.0",
                             limit=limit, rw=holder_sides, election=election,
                             weight=holder_weight)
        # Fillers are not under test: a long lease keeps a renewal that a loaded machine
        # delays from handing their permit to the waiter.
        fillers = [run.spawn("holder", name=name, ttl=FILLER_TTL, worker=f"filler{number}.{i}",
                             limit=limit, weight=weight)
                   for i, weight in enumerate(filler_weights)]
        held: list[WorkerProcess] = []
        try:
            _ready(waiter, *fillers)
            for filler in fillers:
                filler.send("go")
                got = filler.expect(90)
                if not got.get("acquired"):
                    raise WorkerFailed(f"{filler}: could not take its permit")
                held.append(filler)
            for trial in range(trials):
                holder = upcoming
                _ready(holder)
                holder.send("go")
                got = holder.expect(90)
                if trial + 1 < trials:  # the next one starts up while this trial runs
                    upcoming = run.spawn("holder", name=name, ttl=ttl,
                                         worker=f"holder{number}.{trial + 1}", limit=limit,
                                         rw=holder_sides, election=election,
                                         weight=holder_weight)
                if not got.get("acquired"):
                    violations.append(f"lane {number}: holder {trial} could not acquire")
                    holder.kill()
                    continue
                waiter.send("wait")
                # Kill at a random point of the renewal cycle.
                time.sleep(rng.uniform(0.05, ttl))
                killed = now_ns()
                holder.kill()
                # Told of a loss before the kill (a renewal a loaded machine made late)?
                told = got.get("lost_at") is not None or any(
                    report.get("lost") and report["at"] < killed
                    for report in holder.remaining_reports(5.0))
                run.recorder.write(Section(holder.worker, 1, name, got["asked"], got["start"],
                                           killed, got["fence"], lost=told, release="none",
                                           mode=got.get("side"), weight=got.get("weight")))
                run.recorder.event("sigkill", holder.worker)
                trial_bound = bound - 1.0 + scaled(1.0)
                bounds.append(trial_bound)
                answer = waiter.expect(trial_bound + 30)
                if not answer.get("acquired"):
                    violations.append(f"lane {number}: nobody acquired after kill {trial}: "
                                      f"{answer.get('error')}")
                    continue
                recovery = (answer["start"] - killed) / 1e9
                recoveries.append(recovery)
                if recovery > trial_bound:
                    late.append((recovery, trial_bound))
        except BaseException as exc:
            failures.append(exc)
        finally:
            waiter.stop()
            upcoming.kill()
            for filler in held:  # each records its own section, told of a loss or not
                try:
                    filler.send("release")
                    filler.expect(30)
                except Exception as exc:  # its section is then missing: say why
                    violations.append(f"lane {number}: {filler} did not release: {exc!r}")
            for filler in fillers:
                filler.kill()

    threads = [threading.Thread(target=lane, args=(i, share))
               for i, share in enumerate(_split(trials, lanes))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if failures:
        raise failures[0]
    figures = check(run.history(), limit or 1)
    # An overlap here is a holder whose renewal came late (a loaded machine) and whose lease
    # a waiter then took before the kill: allowed only when that holder was told (reported
    # as silent overlaps otherwise); the SIGKILLed holders themselves are never told.
    violations += _common_violations(figures, run.target.backend, overlaps_allowed=True)
    if late:
        worst, worst_bound = max(late)
        violations.append(f"{len(late)} of {len(recoveries)} recoveries over the "
                          f"{bound:.2f} s bound, stretched by the load at each kill "
                          f"(worst {worst:.3f} s against {worst_bound:.2f} s)")
    if len(recoveries) != trials:
        violations.append(f"{len(recoveries)} recoveries measured of {trials}")
    details = {"ttl": ttl, "lanes": lanes,
               "median_recovery": sorted(recoveries)[len(recoveries) // 2] if recoveries else None,
               **_figures_details(figures)}
    # The bound reported is the loosest any trial was held to: the idle figure on an idle
    # machine; each trial was judged against its own above.
    return _Killed(figures, recoveries, max(bounds), details, violations)


# ---- 5. the server restarted -----------------------------------------------------------------


def _until_acquired_after(run: Run, moment: int, timeout: float) -> None:
    """Wait until some worker's section that began at ``moment`` or later is on record (or
    ``timeout`` seconds pass: the verdict then says nobody acquired)."""
    deadline = time.monotonic() + timeout
    while not any(s.start >= moment for s in run.history().sections):
        if time.monotonic() >= deadline:
            return
        time.sleep(0.1)


def server_restart(run: Run, profile: Profile) -> list[Result]:
    server = run.target.server
    if server is None:
        raise RuntimeError("scenario 5 needs a server the harness can restart")
    capabilities = _capabilities(run.target.url)
    ttl = profile.restart_ttl
    name = run.name("restart")
    common = {"name": name, "ttl": ttl, "renew": True, "acquire_timeout": ttl * 3,
              "tolerate_errors": True}
    workers = [run.spawn("sections", hold=[0, ttl * 0.2], think=[0, 0.01], **common)
               for _ in range(profile.restart_processes)]
    # One holder keeps each section longer than the lease, so one spans every restart.
    workers.append(run.spawn("sections", hold=[ttl * 1.5, ttl * 2.5], think=[0, 0.05],
                             **common))
    windows: list[tuple[int, int]] = []
    with run.stopping(*workers):
        _ready(*workers)
        for _ in range(profile.restart_trials):
            time.sleep(ttl * 1.5)
            began = now_ns()
            run.recorder.event("restart-begin")
            server.restart()
            ready = now_ns()
            run.recorder.event("restart-ready", seconds=(ready - began) / 1e9)
            windows.append((began, ready))
            # Long enough for the long holder to finish and someone to acquire after it;
            # then, on a loaded machine where the clients reconnect late (a whole ZooKeeper
            # ensemble restarted), until a section after the restart is on record.
            time.sleep(ttl * 3.5 + 1)
            _until_acquired_after(run, ready, timeout=scaled(30))
    history = run.history()
    figures = check(history)
    promised = (capabilities.fences_survive_restart if run.target.durable is None
                else run.target.durable)
    leases_kept = (capabilities.leases_survive_restart if run.target.durable is None
                   else run.target.durable)
    if run.target.leases_wiped is not None:
        leases_kept = not run.target.leases_wiped
    violations = _common_violations(figures, run.target.backend, overlaps_allowed=True,
                                     fences_promised=promised)
    # Where the restart wiped the leases, a holder taken over inside its ttl is a violation
    # the checker must find (whether one happens depends on who held the lock at the
    # restart: ``certain_overlaps``). Elsewhere the verdict is recorded, not required: the
    # last renewal is read from the handle's hold (``workers._renewed``), and on ZooKeeper
    # (ciC) that reading once placed an extend on a lease the checker had ended, which is
    # the recording's doubt, not the store's, until renewals are recorded as calls.
    takeovers = certain_overlaps(history, ttl=ttl)
    expected = None if leases_kept and promised else (False if takeovers else None)
    figures, violations = _verdict(history, figures, violations, ttl=ttl, expected=expected)
    recoveries = []
    spanning = told = 0
    for began, ready in windows:
        after = [s.start for s in history.sections if s.start >= ready]
        if not after:
            violations.append("no acquisition after a restart")
            continue
        recoveries.append((min(after) - ready) / 1e9)
        for section in history.sections:
            if section.start < began and section.end > ready:
                spanning += 1
                told += section.learned_loss
    if not leases_kept and told < spanning:
        violations.append(f"{spanning - told} of {spanning} holders across a restart that "
                          "loses leases were never told")
    errors = len(history.events_named("backend-error"))
    details = {"ttl": ttl, "processes": len(workers),
               "fences_promised_to_survive": promised,
               "leases_may_survive_restart": leases_kept,
               "sections_spanning_a_restart": spanning, "of_which_told_of_loss": told,
               "backend_errors_seen": errors, "takeovers_inside_a_ttl": takeovers,
               "restart_seconds": [round((r - b) / 1e9, 3) for b, r in windows],
               **_figures_details(figures)}
    variant = ", ".join(filter(None, ["clean stop, then start on the same port and files",
                                      run.target.variant]))
    return [Result(5, "Server restarted", variant, run.target.backend, len(windows),
                   figures.sections, figures.overlaps, None,
                   max(recoveries) if recoveries else None, None,
                   "server ready again to the next acquisition",
                   details=details, violations=violations)]


# ---- 6. the connection cut -------------------------------------------------------------------

OPERATION_TIMEOUT = {"redis": 3.0, "redis_cluster": 3.0, "redlock": 0.2}
"""Each backend's default per-operation timeout, seconds (5 s where not listed)."""

ENSEMBLES = {"etcd", "zookeeper"}
"""Backends whose nodes form one replicated store (server-side quorum): the client talks to
any one node and fails over to another, unlike Redlock's independent nodes."""

TIMEOUT_OPTIONS = {
    "redis": ("socket_timeout", "socket_connect_timeout"),
    "redlock": ("socket_timeout", "socket_connect_timeout"),
}
"""The URL options setting a backend's per-operation timeout (``timeout`` where not listed)."""


def _operation_timeout(url: str, backend: str) -> float:
    """The per-operation timeout a client of ``url`` has: the URL's own setting (the longest
    of its options, which bounds a call), or the backend's default."""
    query = dict(urllib.parse.parse_qsl(url.partition("?")[2]))
    given = [float(query[option]) for option in TIMEOUT_OPTIONS.get(backend, ("timeout",))
             if option in query]
    return max(given) if given else OPERATION_TIMEOUT.get(backend, 5.0)


def _with_timeout(url: str, backend: str, seconds: float) -> str:
    for option in TIMEOUT_OPTIONS.get(backend, ("timeout",)):
        url = _with_option(url, option, seconds)
    return url


def _with_option(url: str, option: str, value: float) -> str:
    """``url`` with ``option`` set to ``value``, replacing a value it had (tenure refuses an
    option given twice). The query is split off as text: splitting and joining the whole URL
    would turn sqlite:////abs/path into sqlite://abs/path (an empty host is not kept)."""
    base, _, query = url.partition("?")
    pairs = [(key, item) for key, item in urllib.parse.parse_qsl(query, keep_blank_values=True)
             if key != option]
    return f"{base}?{urllib.parse.urlencode([*pairs, (option, str(value))])}"


def _endpoints(url: str) -> list[tuple[str, int]]:
    """Every host:port of a URL (Redlock names several, comma-separated)."""
    netloc = urllib.parse.urlsplit(url).netloc.rpartition("@")[2]
    found = []
    for address in netloc.split(","):
        host, _, port = address.rpartition(":")
        if not host or not port.isdigit():
            raise RuntimeError(f"scenario 6 needs host:port addresses, not {address!r}")
        found.append((host.strip("[]"), int(port)))
    return found


def _through(url: str, ports: list[int]) -> str:
    """``url`` with its addresses replaced, in order, by the proxies' loopback ports."""
    parts = urllib.parse.urlsplit(url)
    userinfo, at, _ = parts.netloc.rpartition("@")
    hosts = ",".join(f"127.0.0.1:{port}" for port in ports)
    return urllib.parse.urlunsplit(parts._replace(netloc=f"{userinfo}{at}{hosts}"))


SUSPENSION_IS_LOSS = {"zookeeper"}
"""Backends whose client reports a suspended session as a loss: a cut of the ZooKeeper member
the client talks to suspends its session until it reconnects to another, and tenure, like
Curator's standard policy, tells the holder its lease may be gone rather than hope. There a
cut from all but one member may cost the lease (told, never silently): it is counted."""


def connection_cut(run: Run, profile: Profile) -> list[Result]:
    nodes = len(_endpoints(run.target.url))
    if nodes == 1:
        return _side_by_side([functools.partial(_cut, run.child(mode), profile, mode, cut=1)
                              for mode in ("blackhole", "reset")])
    if run.target.backend in ENSEMBLES:
        # The proxies stand between the client and the nodes only; the nodes still reach each
        # other. A client cut from some nodes reconnects to one it can reach, whose quorum is
        # intact: its session (lease) lives on and is renewed there. Only a cut from every
        # node must cost the lease; a cut from all but one must not.
        counts = (nodes, nodes - 1)
    else:
        # A client-side quorum (Redlock): cutting a majority must cost the lease; cutting a
        # minority must not.
        counts = (nodes // 2 + 1, (nodes - 1) // 2)
    return _side_by_side([
        functools.partial(_cut, run.child(f"{mode}-{count}"), profile, mode, cut=count)
        for count in counts for mode in ("blackhole", "reset")
    ])


def _side_by_side(variants: list[Callable[[], Result]]) -> list[Result]:
    """Run a scenario's variants at once, each in a thread, and return their results in
    order. Each has its own sub-run, names, proxies and workers, and spends most of its time
    waiting out leases and timeouts: one after the other, an ensemble's four cuts took 73 s."""
    with concurrent.futures.ThreadPoolExecutor(len(variants)) as pool:
        futures = [pool.submit(variant) for variant in variants]
        return [future.result() for future in futures]


def _cut(run: Run, profile: Profile, mode: Mode, *, cut: int) -> Result:
    ttl = profile.cut_ttl
    url = run.target.url
    operation = _operation_timeout(url, run.target.backend)
    if profile.cut_operation_timeout is not None and profile.cut_operation_timeout < operation:
        operation = profile.cut_operation_timeout
        url = _with_timeout(url, run.target.backend, operation)
    targets = _endpoints(run.target.url)
    # The whole server, every node of an ensemble, or a majority of a client-side quorum.
    ensemble = run.target.backend in ENSEMBLES
    loses = cut == len(targets) if ensemble else cut > len(targets) // 2
    if ensemble:
        # A client cut from the node it talks to must notice (a call or, on ZooKeeper, the
        # session's read timeout of 2/3 of its timeout) and move to a reachable node before
        # its lease ends: the lease must outlast that, so that keeping it is the promise
        # tested. The session timeout is shortened to keep the run short.
        session = 3 * operation
        url = _with_option(url, "session_timeout", session) \
            if run.target.backend == "zookeeper" else url
        if not loses:
            ttl = max(ttl, 2 * session + operation + 1.0)
    elif not loses and len(targets) > 1:
        # A client-side quorum's renewal waits out the cut node's timeout, and the time it
        # took comes off the validity it grants: the lease must outlast two renewals in a row
        # that each take that long (one starts a third of the validity after the other), with
        # one more of slack for drift and scheduling. Redlock's default 0.2 s keeps ttl 1 s.
        ttl = max(ttl, 4 * operation)
    # A second of slack on an idle machine, stretched by the load now (tests.timing).
    call_bound = 2 * operation + scaled(1.0)
    lost_bound = ttl + call_bound
    watch = ttl * 3 + call_bound
    violations: list[str] = []
    suspended = 0
    lost_after: list[float] = []
    checked_after: list[float] = []
    slowest: dict[str, float] = {}
    recovered: list[float] = []
    for trial in range(profile.cut_trials):
        name = run.name(f"cut{trial}")
        with contextlib.ExitStack() as stack:
            proxies = [stack.enter_context(Proxy(target)) for target in targets]
            holder = run.spawn("cut", url=_through(url, [p.port for p in proxies]), name=name,
                               ttl=ttl, watch=watch)
            observer = run.spawn("waiter", name=name, ttl=ttl, acquire_timeout=watch + 10)
            with run.stopping(holder, observer):
                got = holder.expect(90)
                if not got.get("acquired"):
                    violations.append("the holder could not acquire through the proxy")
                    continue
                _ready(observer)
                time.sleep(ttl / 2)  # renewals flow through the proxies meanwhile
                observer.send("wait")
                for proxy in proxies[:cut]:
                    proxy.set_mode(mode)
                cut_at = now_ns()
                run.recorder.event("cut", mode=mode, proxies=cut)
                holder.send("cut")
                seen = holder.expect(watch + 4 * call_bound + 30)
                took = observer.expect(watch + 30)
                for proxy in proxies[:cut]:
                    proxy.set_mode("pass")
                run.recorder.event("heal")
                holder.send("heal")
                healed = holder.expect(watch + 30)
        if seen["lost_at"] is not None:
            lost_after.append((seen["lost_at"] - cut_at) / 1e9)
        if seen["checked_at"] is not None:
            checked_after.append((seen["checked_at"] - cut_at) / 1e9)
        if loses and seen["lost_at"] is None:
            violations.append(f"trial {trial}: lost never set within {watch:.1f} s")
        if loses and seen["checked_at"] is None:
            violations.append(f"trial {trial}: check() never raised within {watch:.1f} s")
        if not loses and (seen["lost_at"] or seen["checked_at"]):
            if run.target.backend in SUSPENSION_IS_LOSS:
                suspended += 1
            else:
                violations.append(f"trial {trial}: cutting {cut} of {len(targets)} nodes "
                                  "cost the lease")
        for call, outcome in seen["calls"].items():
            slowest[call] = max(slowest.get(call, 0.0), outcome["seconds"])
            limit = call_bound + (0.5 if call.startswith("acquire") else 0.0)
            if outcome["seconds"] > limit:
                violations.append(f"trial {trial}: {call} took {outcome['seconds']} s "
                                  f"(bound {limit} s): {outcome['outcome']}")
        if not took.get("acquired"):
            violations.append(f"trial {trial}: a direct client never got the lock: "
                              f"{took.get('error')}")
        if healed["recovered"] is None:
            violations.append(f"trial {trial}: no acquire through the healed proxy")
        else:
            recovered.append(healed["recovered"])
    figures = check(run.history())
    violations += _common_violations(figures, run.target.backend, overlaps_allowed=False)
    late = [t for t in lost_after if t > lost_bound]
    if loses and late:
        violations.append(f"lost set {max(late):.3f} s after the cut (bound {lost_bound} s)")
    details = {"ttl": ttl, "operation_timeout": operation, "call_bound": call_bound,
               "nodes_cut": f"{cut} of {len(targets)}", "lost_to_a_suspension": suspended,
               "worst_lost_after": max(lost_after, default=None),
               "worst_check_raises_after": max(checked_after, default=None),
               "slowest_calls": slowest,
               "worst_recovery_after_heal": max(recovered, default=None),
               **_figures_details(figures)}
    variant = mode if len(targets) == 1 else f"{mode}, {cut} of {len(targets)} nodes"
    return Result(6, "Connection cut by the proxy", variant, run.target.backend,
                  profile.cut_trials, figures.sections, figures.overlaps, None,
                  max(lost_after, default=None) if loses else None,
                  lost_bound if loses else None,
                  "cut to lost set by the watchdog alone; bound ttl + 2 x operation timeout "
                  "+ 1 s", details=details, violations=violations)


# ---- 7. cancelled and timed-out acquires ----------------------------------------------------


def cancelled_acquires(run: Run, profile: Profile) -> list[Result]:
    count, ttl = profile.cancel_count, profile.cancel_ttl
    worker = run.spawn("cancel", name=run.name("cancel"), ttl=ttl, count=count)
    try:
        summary = worker.expect(120 + count * 0.5 + 3 * ttl)
    finally:
        worker.stop()
    violations = []
    for key in ("held_right_after", "held_after_3_ttl"):
        if summary[key]:
            violations.append(f"{key.replace('_', ' ')}: {summary[key][:3]}")
    for key in ("renewer_tasks_after_3_ttl", "renewer_threads_after_3_ttl"):
        if summary[key]:
            violations.append(f"{summary[key]} {key.replace('_', ' ')}")
    acquired = summary["async_acquired"] + summary["thread_acquired"]
    return [Result(7, "Acquire cancelled or timed out mid-flight",
                   "asyncio cancel + thread timeout", run.target.backend, count, acquired, None,
                   None, None, None, details={"ttl": ttl, **summary}, violations=violations)]


# ---- 8. exactly one winner -------------------------------------------------------------------


def races(run: Run, profile: Profile) -> list[Result]:
    processes, threads = profile.race_processes, profile.race_threads
    if traits(run.target.backend).shared is not None:
        processes, threads = 1, processes * threads  # one process: every contender a thread
    name = run.name("race")
    workers = [run.spawn("race", name=name, threads=threads, ttl=30.0)
               for _ in range(processes)]
    with run.stopping(*workers):
        _ready(*workers)
        for number in range(profile.race_rounds):
            start = now_ns() + 50_000_000  # all start together, 50 ms from now
            for worker in workers:
                worker.send("round", number, start)
            for worker in workers:
                worker.expect(60)
            for worker in workers:
                worker.send("release")
            for worker in workers:
                worker.expect(60)
        for worker in workers:
            worker.send("quit")
    figures = check_races(run.history().attempts)
    violations = []
    if figures.rounds != profile.race_rounds:
        violations.append(f"{figures.rounds} rounds recorded of {profile.race_rounds}")
    if figures.rounds_with_several_winners:
        violations.append(f"{figures.rounds_with_several_winners} rounds with more than one "
                          f"winner (most winners in a round: {figures.most_winners})")
    if figures.rounds_without_a_winner and traits(run.target.backend).split_votes is None:
        violations.append(f"{figures.rounds_without_a_winner} rounds without a winner")
    if figures.errors:
        violations.append(f"{figures.errors} attempts failed with errors")
    return [Result(8, "Exactly one winner", f"{processes * threads} contenders per round",
                   run.target.backend, figures.rounds, figures.rounds, None, None, None, None,
                   details={"processes": processes, "threads_each": threads,
                            **dataclasses.asdict(figures)},
                   violations=violations)]


# ---- 9. hostile names and wrong-typed arguments ---------------------------------------------


def fuzzed_arguments(run: Run, profile: Profile) -> list[Result]:
    # The quick profile replays the same cases every time (the test suite must not flake);
    # the full profile explores new ones on every run.
    worker = run.spawn("fuzz", name=f"fz{run.tag}:", examples=profile.fuzz_examples,
                       derandomize=profile.name == "quick")
    try:
        summary = worker.expect(300 + profile.fuzz_examples * 1.0)
    finally:
        worker.stop()
    violations = list(summary["violations"])
    return [Result(9, "Hostile names, wrong-typed arguments", "hypothesis",
                   run.target.backend, summary["examples"], summary["names_accepted"], None,
                   None, None, None, details=summary, violations=violations)]


# ---- 10. the clock jumped ----------------------------------------------------------------------

CLOCK_JUMP = 2.0
"""How far each trial moves the clock forward, in lease lengths: past any live lease."""


CLOCK_SLACK = 0.25
"""Seconds a moved clock's reading may stray from where the jump should have put it."""


def clock_jumped(run: Run, profile: Profile) -> list[Result]:
    jumping = run.target.clock
    if jumping is None:
        raise RuntimeError("scenario 10 needs a target whose wall clock the harness moves "
                           "(Servers.clocked)")
    setup = jumping.setup
    # Where the moved clock does not judge expiry, stretched with the load now: the only
    # lease that may end there is one whose renewal (every ttl/3) a loaded machine delayed
    # past its ttl; a 1 s lease beside a busy test suite lost one so, and that loss read as
    # the jump's. Where it does judge, the ttl stays as profiled: there the jump must end
    # the lease (a stretched one on MySQL once did not within the trial's wait).
    ttl = profile.clock_ttl if setup.ends_leases else scaled(profile.clock_ttl)
    jump = CLOCK_JUMP * ttl
    astray: list[float] = []  # how far a moved clock read from where it should be

    def jump_clock(victim: WorkerProcess) -> None:
        jumping.clock.jump(jump)
        run.recorder.event("clock-jump", seconds=jump, moves=setup.moves)
        if jumping.read is not None:
            before = time.time() + jumping.clock.offset
            readings = jumping.read()
            after = time.time() + jumping.clock.offset
            astray.extend(max(before - r, r - after, 0.0) for r in readings)
        # Long enough for the victim's renewals (every ttl/3) to meet the moved clock, and
        # for a contender told "busy for up to ttl" to try again.
        time.sleep(ttl * 1.5)

    # Where the jump ends the lease, the victim writes only once a successor has written
    # (or 10 ttl passed): its write is then the stale one, refused by the fence check.
    found = _disturbed(run, ttl=ttl, trials=profile.clock_trials,
                       contenders=profile.pause_contenders, fenced=True, disturb=jump_clock,
                       successor_wait=10 * ttl if setup.ends_leases else 0.0,
                       disturbable=jumping.held_everywhere)
    figures, violations, jumps = found.figures, found.violations, len(found.reports)
    if setup.moves_workers:
        # The victim read its own clock just before each report, after the trial's jump: the
        # clock started true and moved by ``jump`` each trial.
        astray.extend(abs(done["wall"] - (done["received"] + jump * trial))
                      for trial, done in enumerate(found.reports, start=1))
    if jumping.read is None and not setup.moves_workers:
        violations.append("nothing reads the moved clock: a jump that did not take would "
                          "pass unseen")
    unmoved = [error for error in astray if error > CLOCK_SLACK]
    if unmoved:
        violations.append(f"{len(unmoved)} readings of the moved clock were up to "
                          f"{max(unmoved):.3f} s from where the jumps should have put it")
    violations += _common_violations(figures, run.target.backend,
                                     overlaps_allowed=setup.ends_leases)
    if setup.ends_leases:
        if not figures.overlaps:
            violations.append("no jump ended a lease: the clock that judges expiry did not "
                              "move, so nothing was tested")
        if found.told < jumps:
            violations.append(f"{jumps - found.told} of {jumps} holders whose lease the jump "
                              "ended were never told")
    elif found.told:
        violations.append(f"{found.told} leases ended by a clock that does not judge them")
    details = {"ttl": ttl, "jump_seconds": jump, "jumps": jumps, "clock_moved": setup.moves,
               "may_end_leases": setup.ends_leases, "contenders": profile.pause_contenders,
               "victims_told_of_loss": found.told,
               **({"sections_retaken_held_on_a_bare_majority": found.retaken}
                  if jumping.held_everywhere is not None else {}),
               "worst_clock_reading_error": max(astray, default=None),
               **_figures_details(figures)}
    return [Result(10, "Clock jumped forward", run.target.variant, run.target.backend,
                   jumps, figures.sections, figures.overlaps, figures.stale_writes_accepted,
                   None, None, details=details, violations=violations)]


# ---- 11. a node of a replicated store stopped ---------------------------------------------


@runtime_checkable
class NodeControl(Protocol):
    """What scenario 11 needs of an ensemble: stop one node by its role, start it again."""

    def stop_node(self, role: str) -> str: ...

    def start_stopped(self) -> None: ...


NODE_STOP_AFTER = 0.2
"""Share of a variant's sections completed before the node is stopped."""


def node_stopped(run: Run, profile: Profile) -> list[Result]:
    return [_node_stopped(run.child(role), profile, role) for role in ("follower", "leader")]


def _node_stopped(run: Run, profile: Profile, role: str) -> Result:
    """Processes contend on one lock around a shared counter (scenario 2's read, sleep,
    write); once a fifth of the sections are done, one node (a follower, or the Raft / Zab
    leader) is SIGKILLed. The remaining two keep a quorum, so the contention must go on
    through the change: 0 overlaps, 0 lost updates, fences never repeating or going back, and
    sections completed after the stop. Calls cut off by the stop may fail with BackendError
    (counted and reported) and are retried."""
    nodes = run.target.server
    if not isinstance(nodes, NodeControl):
        raise RuntimeError(f"the harness cannot stop single nodes of {run.target.backend}")
    total, processes = profile.node_sections, profile.node_processes
    name = run.name(f"node-{role}")
    resource = Resource(run.workdir, fenced=False).start()
    stopped_at = None
    stopped = ""
    try:
        workers = [
            run.spawn("sections", name=name, count=share, ttl=5.0, acquire_timeout=60.0,
                      renew=True, resource=str(resource.path), hold=[0, 0.001],
                      tolerate_errors=True)
            for share in _split(total, processes)
        ]
        _ready(*workers)
        deadline = time.monotonic() + STALL
        while len(run.history().sections) < total * NODE_STOP_AFTER:
            if time.monotonic() > deadline:
                raise RuntimeError(f"fewer than {total * NODE_STOP_AFTER:.0f} sections in "
                                   f"{STALL:.0f} s before the stop")
            time.sleep(0.05)
        stopped = nodes.stop_node(role)
        stopped_at = now_ns()
        run.recorder.event("node-stopped", stopped, role=role)
        for worker in workers:
            worker.expect_progressing(stall=STALL)
    finally:
        resource.stop()
        nodes.start_stopped()
    history = run.history()
    figures = check(history)
    violations = _common_violations(figures, run.target.backend, overlaps_allowed=False)
    if figures.lost_updates:
        violations.append(f"{figures.lost_updates} updates lost: the counter reads "
                          f"{figures.final_value} after {figures.writes_accepted} increments")
    after = [section for section in history.sections if section.start > (stopped_at or 0)]
    if not after:
        violations.append(f"no section completed after the {role} was stopped")
    if figures.sections != total:
        violations.append(f"{figures.sections} sections recorded, {total} expected")
    first_after = (min(section.start for section in after) - (stopped_at or 0)) / 1e9 \
        if after else None
    errors = len(history.events_named("backend-error"))
    return Result(11, "A node of three stopped", f"the {role}, SIGKILL", run.target.backend, 1,
                  figures.sections, figures.overlaps, figures.stale_writes_accepted,
                  first_after, None, "the stop to the next section's start",
                  details={"processes": processes, "ttl": 5.0, "stopped": stopped,
                           "sections_after_the_stop": len(after),
                           "backend_errors_seen": errors, **_figures_details(figures)},
                  violations=violations)


# ---- 12. semaphores ----------------------------------------------------------------------

SEMAPHORE_LIMIT = 2
"""Permits per semaphore: the smallest limit at which "more than the limit" differs from a
mutex's overlap, so the excess a broken count would allow shows up as often as it can."""


def semaphores(run: Run, profile: Profile) -> list[Result]:
    """Scenarios 1, 3 and 4 again with a semaphore of two permits instead of a mutex: never
    more than two sections at once (checked from the time stamps), fences distinct and
    increasing, a paused holder told it lost its permit, a killed holder's permit free within
    its ttl + ttl/3 + 1 s."""
    limit = SEMAPHORE_LIMIT
    title = f"Semaphore, limit {limit}"
    backend = run.target.backend
    processes = profile.semaphore_processes
    # Holds longer than the mutex baseline's, so that two permits are held at once often.
    figures, violations = _contended(run.child("baseline"), processes,
                                     profile.semaphore_sections, hold=[0.002, 0.02],
                                     limit=limit)
    if figures.most_at_once < limit:
        violations.append(f"never more than {figures.most_at_once} permit held at once: the "
                          "limit was not reached, nothing was tested")
    contended = Result(12, title, "baseline", backend, 1, figures.sections, figures.overlaps,
                       None, None, None,
                       details={"processes": processes, "limit": limit, "ttl": CONTENDED_TTL,
                                **_figures_details(figures)},
                       violations=violations)
    ttl, contenders = profile.pause_ttl, max(limit, profile.pause_contenders)
    overrun = _capabilities(run.target.url).lease_overrun  # as scenario 3's pause
    paused = _pause_trials(run.child("paused"), profile.semaphore_pause_trials, ttl,
                           contenders, fenced=False, limit=limit, overrun=overrun)
    paused_result = Result(12, title, "holder paused 1.5x TTL", backend,
                           profile.semaphore_pause_trials, paused.figures.sections,
                           paused.figures.overlaps, None, None, None,
                           details={"limit": limit,
                                    **_pause_details(paused, ttl, contenders, overrun)},
                           violations=paused.violations)
    killed = _kill_trials(run.child("killed"), profile.semaphore_kill_trials, profile.kill_ttl,
                          profile.kill_lanes, limit=limit)
    killed_result = Result(12, title, "holder killed (SIGKILL)", backend,
                           len(killed.recoveries), killed.figures.sections,
                           killed.figures.overlaps, None,
                           max(killed.recoveries) if killed.recoveries else None, killed.bound,
                           KILL_RECOVERY, details={"limit": limit, **killed.details},
                           violations=killed.violations)
    return [contended, paused_result, killed_result]


# ---- 13. a Sentinel failover -------------------------------------------------------------


@runtime_checkable
class FailoverControl(Protocol):
    """What scenario 13 needs of a replicated set-up: kill its primary, wait until the
    watchers promote a replica, bring the killed server back as a replica."""

    def kill_primary(self) -> str: ...

    def wait_promoted(self) -> str: ...

    def rejoin(self) -> None: ...


def sentinel_failover(run: Run, profile: Profile) -> list[Result]:
    """Processes contend on one lock with renewal around a fence-checking resource (scenario
    2's read, sleep, write). For each failover one more process takes the lock, reads and
    writes the resource under its fence, and holds on; while it does, the primary is
    SIGKILLed; once the sentinels have promoted the replica it releases (its release meets
    the new primary: it is told there whether its lease survived), and the killed server
    comes back as a replica of the new primary (so that the next failover has one to
    promote). Replication is asynchronous: what the primary had not yet sent its replica (a
    lease, the last fence increments) is gone after the promotion. Overlaps are therefore
    possible and reported, not judged; what is judged: every holder in an overlap was told
    (no silent overlap), the resource accepted no stale write (a fence given again after
    the promotion, meeting the holder's write under the same fence, counts as one), no
    update was lost, fences never repeated or went back, and locks were granted again after
    every failover."""
    control = run.target.server
    if not isinstance(control, FailoverControl):
        raise RuntimeError(f"the harness cannot fail over {run.target.backend}")
    ttl, processes = profile.failover_ttl, profile.failover_processes
    name = run.name("failover")
    resource = Resource(run.workdir, fenced=True).start()
    windows: list[tuple[int, int]] = []
    killed: list[str] = []
    rejoin_seconds: list[float] = []
    try:
        workers = [run.spawn("sections", name=name, ttl=ttl, renew=True,
                             acquire_timeout=ttl * 3, tolerate_errors=True,
                             resource=str(resource.path), hold=[0, 0.005], think=[0, 0.005])
                   for _ in range(processes - 1)]
        with run.stopping(*workers):
            _ready(*workers)
            for trial in range(profile.failover_trials):
                time.sleep(ttl * 1.5)
                spanner = run.spawn("holder", name=name, ttl=ttl, worker=f"spanner{trial + 1}",
                                    resource=str(resource.path))
                with run.stopping(spanner):
                    _ready(spanner)
                    spanner.send("go")
                    took = spanner.expect(60)
                    if not took.get("acquired"):
                        raise RuntimeError(f"{spanner}: no lease to hold across the failover "
                                           f"within 30 s: {took}")
                    began = now_ns()
                    killed.append(control.kill_primary())
                    run.recorder.event("primary-killed", killed[-1])
                    promoted = control.wait_promoted()
                    ready = now_ns()
                    run.recorder.event("replica-promoted", promoted,
                                       seconds=(ready - began) / 1e9)
                    windows.append((began, ready))
                    spanner.send("release")
                    spanner.expect(60)
                control.rejoin()
                rejoined = now_ns()
                run.recorder.event("old-primary-rejoined", killed[-1])
                rejoin_seconds.append(round((rejoined - ready) / 1e9, 3))
                time.sleep(ttl)
    finally:
        resource.stop()
    history = run.history()
    figures = check(history)
    violations = _common_violations(figures, run.target.backend, overlaps_allowed=True)
    if figures.stale_writes_accepted:
        violations.append(f"{figures.stale_writes_accepted} stale writes accepted by the "
                          "fence-checking resource")
    if figures.lost_updates:
        violations.append(f"{figures.lost_updates} updates lost: the counter reads "
                          f"{figures.final_value} after {figures.writes_accepted} increments")
    recoveries = []
    spanning = told = 0
    fences: list[list[int | None]] = []
    for began, ready in windows:
        after = [s for s in history.sections if s.start >= began]
        if not after:
            violations.append("no acquisition after a failover")
            continue
        recoveries.append((min(s.start for s in after) - began) / 1e9)
        before = [s.fence for s in history.sections if s.start < began and s.fence is not None]
        first = min((s for s in after if s.fence is not None), key=lambda s: s.start,
                    default=None)
        fences.append([max(before) if before else None, first.fence if first else None])
        for section in history.sections:
            if section.start < began and section.end > ready:
                spanning += 1
                told += section.learned_loss
    errors = len(history.events_named("backend-error"))
    details = {"ttl": ttl, "processes": processes, "failovers": len(windows),
               "primaries_killed": killed,
               "promotion_seconds": [round((r - b) / 1e9, 3) for b, r in windows],
               "rejoin_seconds": rejoin_seconds,
               "recovery_seconds": [round(r, 3) for r in recoveries],
               "fence_before_and_after": fences,
               "sections_spanning_a_failover": spanning, "of_which_told_of_loss": told,
               "leases_that_survived": spanning - told,
               "sections_told_of_loss": sum(s.learned_loss for s in history.sections),
               "backend_errors_seen": errors, **_figures_details(figures)}
    return [Result(13, "Sentinel failover", "primary SIGKILLed, replica promoted, the killed "
                   "server back as a replica", run.target.backend, len(windows),
                   figures.sections, figures.overlaps, figures.stale_writes_accepted,
                   max(recoveries) if recoveries else None, None,
                   "primary SIGKILLed to the next acquisition",
                   details=details, violations=violations)]


# ---- the table -------------------------------------------------------------------------------


# ---- 14. clean-up of idle records --------------------------------------------------------

CLEANUP_GC_AFTER = 0.3
"""Seconds a name's record outlives its last lease in scenario 14."""
CLEANUP_TTL = 0.5


def cleanup(run: Run, profile: Profile) -> list[Result]:
    """Processes take turns on one lock, pausing between sections for up to three times the
    lease plus ``gc_after``, so that the name is often idle long enough for its record (its
    fence) to be removed; the controller watches the record come and go through ``inspect``
    (the same answer as for a name never used: None). Judged: fences never repeat or go back
    across the removals, no two sections overlap, and the record was seen removed and then
    used again (else nothing was tested)."""
    gc_after, ttl = CLEANUP_GC_AFTER, CLEANUP_TTL
    url = _with_option(run.target.url, "gc_after", gc_after)
    name = run.name("cleanup")
    processes, total = profile.cleanup_processes, profile.cleanup_sections
    workers = [
        run.spawn("sections", url=url, name=name, count=share, ttl=ttl, acquire_timeout=30.0,
                  modes=["blocking", "try", "with"], hold=[0, 0.01],
                  think=[0, 3 * (ttl + gc_after)])
        for share in _split(total, processes)
    ]
    # Traffic on other names all along, as in a store of per-entity names: a backend may
    # clean up from its own steps (SQLite sweeps after releases), not only by the clock.
    others = run.spawn("sections", url=url, name=f"{name}:other", ttl=ttl, hold=[0, 0.005],
                       think=[0.01, 0.05])
    watching = threading.Event()
    seen = {"removed": 0, "reused": 0}

    def watch() -> None:
        present = False
        with tenure.connect(url) as locks:
            while not watching.is_set():
                now = locks.inspect(name) is not None
                if present and not now:
                    seen["removed"] += 1
                elif now and not present and seen["removed"]:
                    seen["reused"] += 1
                present = now
                time.sleep(0.02)

    watcher = threading.Thread(target=watch, name="cleanup-watch", daemon=True)
    with run.stopping(others):
        _ready(*workers, others)
        watcher.start()
        try:
            for worker in workers:
                worker.expect_progressing(stall=STALL)
        finally:
            watching.set()
            watcher.join(10)
    figures = check(run.history())
    violations = _common_violations(figures, run.target.backend, overlaps_allowed=False)
    watched = sum(1 for section in run.history().sections if section.name == name)
    if watched != total:
        violations.append(f"{watched} sections of the watched name recorded, {total} "
                          "expected")
    if not seen["removed"] or not seen["reused"]:
        violations.append(f"the record was seen removed {seen['removed']} times and used "
                          f"again {seen['reused']} times: nothing was tested")
    return [Result(14, "Idle records cleaned up", f"gc_after {gc_after:g} s",
                   run.target.backend, 1, watched, figures.overlaps, None, None, None,
                   details={"processes": processes, "ttl": ttl, "gc_after": gc_after,
                            "sections_on_other_names": figures.sections - watched,
                            "records_removed_seen": seen["removed"],
                            "records_used_again_seen": seen["reused"],
                            **_figures_details(figures)},
                   violations=violations)]


# ---- 15. read-write locks ----------------------------------------------------------------

RW_HOLD = [0.002, 0.02]
"""Seconds each section of scenario 15's baseline holds: long enough for reads to overlap."""


def _write_wait_bound(processes: int) -> float:
    """Seconds a writer may wait in scenario 15's baseline. Waiters are served in arrival
    order and each process waits for one section at a time, so a writer waits behind at most
    one section of every other process: each its hold, the wake-up of the next (a waiter
    polls at least every ``QUEUE_TTL / 3``) and half a second of round trips on a loaded
    machine; plus a second. A stream of readers passing a waiting writer exceeds it."""
    return (processes - 1) * (RW_HOLD[1] + tenure.QUEUE_TTL / 3 + 0.5) + 1.0


def rwlocks(run: Run, profile: Profile) -> list[Result]:
    """Scenarios 1, 3 and 4 again on a read-write lock, each section a read or a write at
    random: a write never overlaps another section (reads do overlap each other, or nothing
    was tested), fences distinct and increasing with every write's above all earlier ones, no
    writer waits past its bound, a paused writer is told it lost the lock, a killed writer's
    lock comes back within its ttl + ttl/3 + 1 s."""
    title = "Read-write lock"
    backend = run.target.backend
    processes = profile.rwlock_processes
    contended_run = run.child("baseline")
    figures, violations = _contended(contended_run, processes, profile.rwlock_sections,
                                     hold=RW_HOLD, rw=True)
    if not figures.most_readers_at_once or figures.most_readers_at_once < 2:
        violations.append(f"never more than {figures.most_readers_at_once} reader at once: "
                          "reads were never shared, nothing was tested")
    history = contended_run.history()
    waits: dict[str, float] = {}
    for side in RW_SIDES:
        held = [s for s in history.sections if s.mode == side]
        waits[side] = max(((s.start - s.asked) / 1e9 for s in held), default=0.0)
    bound = _write_wait_bound(processes)
    # A section whose call failed (a BackendError the workers tolerate from a healthy but
    # loaded server, at most one in 50) may leave its lease to run out its ttl: a
    # writer waiting behind it is not starved by readers (ci14, MySQL: 10.155 s). Such a
    # wait is excused only if a failure came within one ttl before it ended.
    failures = [e.at for e in history.events_named("backend-error")]
    behind_failures = 0
    starved = 0.0
    for section in history.sections:
        wait = (section.start - section.asked) / 1e9
        if section.mode != "write" or wait <= bound:
            continue
        if any(section.start - CONTENDED_TTL * 1e9 <= at <= section.start for at in failures):
            behind_failures += 1
        else:
            starved = max(starved, wait)
    if starved:
        violations.append(f"a writer waited {starved:.3f} s, over the {bound:.2f} s "
                          "bound: writers starve")
    gave_up = [e for e in history.events_named("acquire-timeout") if e.data["side"] == "write"]
    if gave_up:
        violations.append(f"{len(gave_up)} write acquires timed out: writers starve")
    sides = {side: sum(1 for s in history.sections if s.mode == side) for side in RW_SIDES}
    contended = Result(15, title, "baseline", backend, 1, figures.sections, figures.overlaps,
                       None, waits["write"], bound, WRITE_WAIT,
                       details={"processes": processes, "ttl": CONTENDED_TTL,
                                "reads": sides["read"], "writes": sides["write"],
                                "longest_write_wait": round(waits["write"], 4),
                                "write_waits_behind_a_failed_call": behind_failures,
                                "longest_read_wait": round(waits["read"], 4),
                                "write_acquires_timed_out": len(gave_up),
                                **_figures_details(figures)},
                       violations=violations)
    ttl, contenders = profile.pause_ttl, profile.pause_contenders
    trials = profile.rwlock_pause_trials
    # etcd's leases outlive their ttl by up to 1.5 s (whole seconds, expiry checked every
    # 0.5 s): a pause of 1.5x the ttl alone may end before anyone else could take the lock.
    overrun = _capabilities(run.target.url).lease_overrun
    paused = _pause_trials(run.child("paused"), trials, ttl, contenders, fenced=False, rw=True,
                           overrun=overrun)
    if paused.told != trials:
        paused.violations.append(f"{trials - paused.told} of {trials} paused writers were "
                                 "never told their lease was gone")
    paused_result = Result(15, title, "writer paused 1.5x TTL", backend, trials,
                           paused.figures.sections, paused.figures.overlaps, None, None, None,
                           details=_pause_details(paused, ttl, contenders, overrun),
                           violations=paused.violations)
    killed = _kill_trials(run.child("killed"), profile.rwlock_kill_trials, profile.kill_ttl,
                          profile.kill_lanes, rw=True, overrun=overrun)
    killed_result = Result(15, title, "writer killed (SIGKILL)", backend,
                           len(killed.recoveries), killed.figures.sections,
                           killed.figures.overlaps, None,
                           max(killed.recoveries) if killed.recoveries else None, killed.bound,
                           KILL_RECOVERY, details=killed.details, violations=killed.violations)
    return [contended, paused_result, killed_result]


# ---- 16. leader election ----------------------------------------------------------------


def elections(run: Run, profile: Profile) -> list[Result]:
    """Scenarios 1, 3 and 4 again on a leader election: processes campaign, lead a short
    term and resign; a leader is paused 1.5x its ttl, its write to a resource that checks
    terms as fences coming after its successor's; a leader is killed. Judged: two terms
    never overlap unless the older leader was told it lost, a term is above every term that
    ended before it began, the resource accepts no stale write, a killed leader is succeeded
    within its ttl + ttl/3 + 1 s."""
    title = "Leader election"
    backend = run.target.backend
    processes = profile.election_processes
    contended_run = run.child("baseline")
    figures, violations = _contended(contended_run, processes, profile.election_terms,
                                     hold=[0, 0.005], election=True)
    regressed, found = _terms(contended_run)
    violations += found
    contended = Result(16, title, "baseline", backend, 1, figures.sections, figures.overlaps,
                       None, None, None,
                       details={"processes": processes, "ttl": CONTENDED_TTL,
                                "term_regressions": regressed, **_figures_details(figures)},
                       violations=violations)
    ttl, contenders = profile.pause_ttl, profile.pause_contenders
    trials = profile.election_pause_trials
    paused_run = run.child("paused")
    overrun = _capabilities(run.target.url).lease_overrun  # as scenario 15's pause
    paused = _pause_trials(paused_run, trials, ttl, contenders, fenced=True, election=True,
                           overrun=overrun)
    paused_regressed, found = _terms(paused_run)
    paused.violations += found
    if paused.told != trials:
        paused.violations.append(f"{trials - paused.told} of {trials} paused leaders were "
                                 "never told their leadership was gone")
    paused_result = Result(16, title, "leader paused 1.5x TTL", backend, trials,
                           paused.figures.sections, paused.figures.overlaps,
                           paused.figures.stale_writes_accepted, None, None,
                           details={"term_regressions": paused_regressed,
                                    **_pause_details(paused, ttl, contenders, overrun)},
                           violations=paused.violations)
    killed_run = run.child("killed")
    killed = _kill_trials(killed_run, profile.election_kill_trials, profile.kill_ttl,
                          profile.kill_lanes, election=True, overrun=overrun)
    killed_regressed, found = _terms(killed_run)
    killed.violations += found
    killed_result = Result(16, title, "leader killed (SIGKILL)", backend,
                           len(killed.recoveries), killed.figures.sections,
                           killed.figures.overlaps, None,
                           max(killed.recoveries) if killed.recoveries else None, killed.bound,
                           "SIGKILL to the next leader's win; bound ttl + ttl/3 + 1 s",
                           details={"term_regressions": killed_regressed, **killed.details},
                           violations=killed.violations)
    return [contended, paused_result, killed_result]


def _terms(run: Run) -> tuple[int, list[str]]:
    """Terms never go back: each above every term that ended before it began (the rule of a
    rwlock's writes, every term being as exclusive as a write). The count, and the
    violation with the first case."""
    regressed = write_fence_regressions(run.history().sections, every=True)
    if not regressed:
        return 0, []
    earlier, later = regressed[0]
    return len(regressed), [f"{len(regressed)} terms not above every term that ended before "
                            f"they began (first: {later.key} term {later.fence} after "
                            f"{earlier.key} term {earlier.fence})"]


# ---- 17. weighted permits --------------------------------------------------------------

WEIGHTED_LIMIT = 8
"""Units per weighted semaphore: as the issue's 16 processes with weights 1-3 on limit 8."""

WEIGHTS = [1, 2, 3]
"""The weights a permit of the baseline picks from, at random, permit by permit."""

WEIGHTED_KILL = (3, [3, 2], 3)
"""The killed lanes' weights: the holder under test takes 3 units, two fillers 3 and 2 all
along, the waiter asks 3: only the killed holder's units, back after its ttl, let it in."""


CYCLES = 5
"""Uncontended acquire-and-release cycles timed by ``_cycle_seconds``."""


def _cycle_seconds(url: str, name: str) -> float:
    """The median time of an uncontended weighted permit's acquire and release on the store
    at ``url`` (a fresh name; the client's set-up excluded), measured now, under whatever
    load the machine has: the unit the weighted baseline's holds are scaled by."""
    with tenure.connect(url) as locks:
        permit = locks.semaphore(name, limit=WEIGHTED_LIMIT, weight=max(WEIGHTS), ttl=10.0)
        locks.inspect(name, kind="semaphore")  # the client's first contact, not timed
        took = []
        for _ in range(CYCLES):
            began = time.monotonic()
            with permit:
                pass
            took.append(time.monotonic() - began)
    return sorted(took)[len(took) // 2]


def weighted_permits(run: Run, profile: Profile) -> list[Result]:
    """Scenarios 12's baseline and killed holder again with weighted permits
    (``locks.semaphore(name, limit=8, weight=W)``) on every backend that offers them: the
    units of the sections in progress (the sum of their weights, from the recorded
    intervals) never above the limit, fences distinct and increasing per name, every
    section recorded, no blocking acquire timed out (a heavy permit starved), and a killed
    holder's units back within its ttl + ttl/3 + 1 s with nobody over the limit meanwhile."""
    limit = WEIGHTED_LIMIT
    title = f"Weighted permits, limit {limit}"
    backend = run.target.backend
    # A store that lives in its process (memory://) is shared by threads only: the baseline
    # runs its contenders as threads of one worker process, and there is no killed holder
    # (its death would take the store with it).
    in_process = traits(backend).shared is not None
    processes = 1 if in_process else profile.weighted_processes
    threads = profile.weighted_processes if in_process else None
    # Holds long enough for permits to meet, so that the units in use often stand at the
    # limit and heavy permits wait for the light ones ahead of them: scenario 12's, or 2-10
    # times this store's own acquire and release where that is longer. On a slow store
    # (mongoeco under a loaded CI run) 2-20 ms holds left each worker mostly acquiring, and
    # the units never passed 5 of 8.
    cycle = _cycle_seconds(run.target.url, run.name("cycle"))
    child = run.child("baseline")
    figures, violations = _contended(child, processes, profile.weighted_sections,
                                     hold=[max(0.002, 2 * cycle), max(0.02, 10 * cycle)],
                                     limit=limit, weights=WEIGHTS, threads=threads)
    history = child.history()
    units = figures.most_units_at_once or 0
    # The limit binds once a permit of the heaviest weight cannot fit beside those held.
    if units <= limit - max(WEIGHTS):
        violations.append(f"never more than {units} units held at once: the limit never "
                          "refused a permit, nothing was tested")
    timeouts = history.events_named("acquire-timeout")
    if timeouts:
        first = timeouts[0].data
        violations.append(f"{len(timeouts)} blocking acquires timed out (the first a permit "
                          f"of weight {first.get('weight')} after {first.get('waited'):.1f} "
                          "s): a waiter starved")
    waits = [(s.start - s.asked) / 1e9 for s in history.sections]
    by_weight = ", ".join(f"{sum(1 for s in history.sections if s.weight == w)} of weight {w}"
                          for w in WEIGHTS)
    contended = Result(17, title, "baseline", backend, 1, figures.sections, figures.overlaps,
                       None, None, None,
                       details={"processes": processes, "threads_each": threads,
                                "limit": limit, "permits_by_weight": by_weight,
                                "uncontended_cycle": round(cycle, 4),
                                "ttl": CONTENDED_TTL, "longest_wait": max(waits, default=None),
                                "acquire_timeouts": len(timeouts),
                                **_figures_details(figures)},
                       violations=violations)
    if in_process:
        return [contended]
    killed = _kill_trials(run.child("killed"), profile.weighted_kill_trials, profile.kill_ttl,
                          profile.kill_lanes, limit=limit, weights=WEIGHTED_KILL,
                          overrun=_capabilities(run.target.url).lease_overrun)
    holder, fillers, waiter = WEIGHTED_KILL
    killed_result = Result(17, title, "holder killed (SIGKILL)", backend,
                           len(killed.recoveries), killed.figures.sections,
                           killed.figures.overlaps, None,
                           max(killed.recoveries) if killed.recoveries else None, killed.bound,
                           KILL_RECOVERY,
                           details={"limit": limit, "holder_weight": holder,
                                    "filler_weights": fillers, "waiter_weight": waiter,
                                    **killed.details},
                           violations=killed.violations)
    return [contended, killed_result]


WRITE_WAIT = ("a write's acquire call to its grant (longest); bound: one section of every "
              "other process, each with its hold, a waiter's poll and 0.5 s, plus 1 s")


@dataclasses.dataclass(frozen=True)
class Scenario:
    number: int
    key: str
    title: str
    needs: tuple[str, ...]
    """Traits it needs: "shared", "restart", "proxy", "clock"."""
    run: Callable[[Run, Profile], list[Result]]
    shows: str
    """What it demonstrates, for the docs."""

    def not_applicable(self, backend: str) -> str | None:
        """None if the scenario runs on ``backend``; else why it does not."""
        found = traits(backend)
        for need in self.needs:
            reason: str | None = getattr(found, need)
            if reason is not None:
                return reason
        return None


SCENARIOS: dict[str, Scenario] = {
    s.key: s
    for s in [
        Scenario(1, "baseline", "Baseline", ("shared",), baseline,
                 "random acquire styles, holds and pauses across processes: no two critical "
                 "sections overlap"),
        Scenario(2, "lost-updates", "Lost updates", ("shared",), lost_updates,
                 "a non-atomic read-sleep-write of a shared counter loses no increment"),
        Scenario(3, "paused", "Holder paused 1.5x TTL", ("shared",), paused_holder,
                 "a SIGSTOPped holder resumes after its lease: the overlap happens and is "
                 "reported; the fence check rejects every stale write"),
        Scenario(4, "killed", "Holder killed (SIGKILL)", ("shared",), killed_holder,
                 "a holder killed with SIGKILL is replaced within ttl + renewal interval + 1 s"),
        Scenario(5, "restart", "Server restarted", ("shared", "restart"), server_restart,
                 "fences never repeat or go back where the backend promises durability; "
                 "holders learn of lost leases"),
        Scenario(6, "cut", "Connection cut by the proxy", ("shared", "proxy"), connection_cut,
                 "with the network blackholed or reset, renewals fail, lost is set, no call "
                 "hangs past its timeout, and the client recovers once healed"),
        Scenario(7, "cancel", "Acquire cancelled or timed out mid-flight", (),
                 cancelled_acquires,
                 "cancelled and timed-out acquires leave no lock and no renewal behind"),
        Scenario(8, "race", "Exactly one winner", (), races,
                 "many contenders starting at one instant: exactly one wins every round"),
        Scenario(9, "fuzz", "Hostile names, wrong-typed arguments", (), fuzzed_arguments,
                 "names are data, never code; bad arguments fail clearly and leave nothing"),
        Scenario(10, "clock", "Clock jumped forward", ("shared", "clock"), clock_jumped,
                 "a wall clock jumps past the lease inside a holder's section: where that clock "
                 "judges expiry the lease ends early, the holder is told and the fence check "
                 "rejects its write; the clients' clocks never end a lease"),
        Scenario(11, "nodes", "A node of three stopped", ("shared", "nodes"), node_stopped,
                 "a follower, then the leader, of a replicated store is SIGKILLed while "
                 "processes contend: locks are still granted, no overlap, no lost update, "
                 "fences keep increasing across the change of leader"),
        Scenario(12, "semaphore", "Semaphore, limit 2", ("shared", "semaphore"), semaphores,
                 "scenarios 1, 3 and 4 with two permits instead of one lock: never more than "
                 "two holders, a paused holder is told, a killed holder's permit comes back"),
        Scenario(13, "failover", "Sentinel failover", ("shared", "failover"),
                 sentinel_failover,
                 "the primary is SIGKILLed while processes contend through redis+sentinel://: "
                 "the replica is promoted, every holder whose lease did not survive is told, "
                 "the fence check rejects every stale write and fences never go back"),
        Scenario(14, "cleanup", "Idle records cleaned up", ("shared", "cleanup"), cleanup,
                 "with gc_after shorter than the pauses between sections, a name's record is "
                 "removed again and again while processes take turns on it: fences never "
                 "repeat or go back, no two sections overlap"),
        Scenario(15, "rwlock", "Read-write lock", ("shared", "rwlock"), rwlocks,
                 "scenarios 1, 3 and 4 on a read-write lock, sections reading or writing at "
                 "random: readers share it, a writer never overlaps anyone, a write's fence "
                 "exceeds every earlier one, no writer starves, a paused writer is told, a "
                 "killed writer's lock comes back"),
        Scenario(16, "election", "Leader election", ("shared", "election"), elections,
                 "scenarios 1, 3 and 4 on an election: terms never overlap unless the older "
                 "leader is told, terms keep increasing, a paused leader is told, a killed "
                 "leader is succeeded within its ttl + ttl/3 + 1 s"),
        Scenario(17, "weighted", "Weighted permits, limit 8", ("weighted",),
                 weighted_permits,
                 "scenario 12's baseline and killed holder with permits of weights 1-3 on 8 "
                 "units: the units in use never exceed 8, fences keep increasing, no heavy "
                 "permit starves, a killed holder's units come back after its ttl (memory: "
                 "the baseline only, its contenders threads of one process)"),
    ]
}


def applicable(key: str, backends: list[str]) -> list[str]:
    return [b for b in backends if SCENARIOS[key].not_applicable(b) is None]


def run_scenario(key: str, target: Target, profile: Profile, workdir: Any,
                 seed: int = 1) -> list[Result]:
    """Run one scenario on one backend. A harness failure (a worker dying, a server not
    coming back) is a failed result, never a silent pass."""
    scenario = SCENARIOS[key]
    began = time.monotonic()
    run = Run(target, workdir, seed, lifetime=_lifetime(profile))
    try:
        results = scenario.run(run, profile)
    except Exception as exc:
        results = [Result(scenario.number, scenario.title, "", target.backend, 0, 0, None, None,
                          None, None, violations=[f"the run failed: {exc!r}"],
                          details={"traceback": traceback.format_exc()[-3000:]})]
    finally:
        run.close()
    elapsed = time.monotonic() - began
    for result in results:
        result.seconds = round(elapsed / len(results), 1)
    return results


def _lifetime(profile: Profile) -> float:
    return 900.0 if profile.name == "quick" else 7200.0
