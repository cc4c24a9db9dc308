"""Plain values passed between the lock logic, the backends and callers."""

from __future__ import annotations

import dataclasses
import datetime
import enum

__all__ = [
    "Busy",
    "Capabilities",
    "Grant",
    "Holder",
    "Kind",
    "Leader",
    "LeaseInfo",
    "LeaseSpec",
    "LockInfo",
    "Mode",
    "Renewal",
    "WaiterInfo",
    "queue_kind",
]


class Kind(enum.StrEnum):
    """What is leased under a name: each kind's records are kept apart from the others', so
    a lock and a semaphore of one name are different things. A str, so that records, output
    and ``LockInfo.kind`` read as before ("lock", "semaphore", "rwlock")."""

    LOCK = "lock"
    """At most one live lease per name (an election's leadership is one, with a value)."""
    SEMAPHORE = "semaphore"
    """Up to ``limit`` live leases (permits) per name."""
    RWLOCK = "rwlock"
    """Read (shared) and write (exclusive) leases granted in arrival order from a queue of
    waiting places; a fair lock is the write side alone."""


class Mode(enum.StrEnum):
    """A queued lease's mode: readers share a name, a writer excludes everybody."""

    READ = "read"
    WRITE = "write"


@dataclasses.dataclass(frozen=True, slots=True)
class LeaseSpec:
    """What one acquire asks the store for, beside the name, token, ttl and holder: the
    kind of lease and the parameters that kind takes (and only those)."""

    kind: Kind = Kind.LOCK
    limit: int = 1
    """How many units the name's live leases may take together (a semaphore's limit; 1
    otherwise)."""
    weight: int = 1
    """How many of the limit's units this lease takes (a weighted permit's; 1 otherwise)."""
    mode: Mode | None = None
    """A queued lease's mode (kind RWLOCK only)."""
    value: str | None = None
    """A value stored with a lock's lease when it is granted (an election's leader value)."""
    queue_ttl: float | None = None
    """Seconds a refused queued attempt's waiting place outlives the attempt (kind RWLOCK;
    kind SEMAPHORE on a store that offers "weighted": its permits queue in arrival order)."""
    fair: bool = False
    """A fair lock's lease (kind RWLOCK, mode WRITE): the same lease as the read-write lock's
    write side, granted by the same rule; the store keeps the flag with the lease and its
    waiting place only so that the operator's views name the primitive that made them."""

    @property
    def queues(self) -> bool:
        """A refused attempt holds a place in a server-side queue from that answer on: a
        read-write (or fair) lock's, and a semaphore's given a ``queue_ttl`` (weighted FIFO
        permits: granted while the units of live permits, plus the weights of the live places
        ahead, plus this weight stay within the limit)."""
        return self.kind is Kind.RWLOCK or (
            self.kind is Kind.SEMAPHORE and self.queue_ttl is not None
        )

    @property
    def shared(self) -> bool:
        """Several leases of this spec on one name may be live at once."""
        return self.mode is Mode.READ


@dataclasses.dataclass(frozen=True, slots=True)
class Holder:
    """Who holds a lock, as stored beside it for ``tenure ls`` / ``tenure show``."""

    host: str
    pid: int
    thread: str
    """The thread name, or the asyncio task name, that acquired the lock."""


@dataclasses.dataclass(frozen=True, slots=True)
class LeaseInfo:
    """One live lease on a name: a semaphore's permit, a read-write lock's reader or writer
    (a lock's holder is one too)."""

    holder: Holder
    acquired_at: datetime.datetime | None
    """When this lease was granted, by the server's clock (UTC)."""
    ttl_left: float
    """Seconds until this lease runs out, by the server's clock."""
    fence: int | None = None
    """The fence this lease was granted with, where the backend keeps it per lease."""
    mode: str | None = None
    """A read-write lock's lease: "read" (shared) or "write" (exclusive; a fair lock's holder
    too). None for the other primitives."""
    fair: bool = False
    """A fair lock's lease (``locks.lock(name, fair=True)``), not a read-write lock's write
    handle's (the two are the same lease of the name's queue)."""
    weight: int = 1
    """How many of a semaphore's units this permit takes (1 for every other lease)."""


@dataclasses.dataclass(frozen=True, slots=True)
class WaiterInfo:
    """One waiter holding a place in a queued primitive's queue (a read-write or fair
    lock's, a queued semaphore's): who waits, since when, for which mode or weight."""

    holder: Holder | None
    """Who waits; None when the place does not say (written by an older tenure)."""
    since: datetime.datetime | None
    """When the waiter took its place, by the server's clock (UTC; on etcd, which has no
    clock to read, by the waiter's, as its leases' ``acquired_at``); None when unknown."""
    mode: str | None = None
    """What it waits for: "read" or "write" (a fair lock's waiters wait to write)."""
    weight: int | None = None
    """A semaphore's waiter: how many units its permit will take (None for a lock's)."""


@dataclasses.dataclass(frozen=True, slots=True)
class LockInfo:
    """What a backend knows about one name of one primitive, read in one atomic step.

    Every kind carries its live leases in ``leases``: a lock at most one (which ``holder``,
    ``acquired_at`` and ``ttl_left`` also describe), a semaphore up to ``limit``, a
    read-write lock (``kind="rwlock"``, which a fair lock of the same name is the write side
    of) its readers or its one writer, each with its ``mode``, and its ``waiters`` (their
    count is ``queued``); the same record reads ``kind="fair"`` while every live lease and
    waiter in it is a fair lock's. A semaphore's leases each carry their ``weight``
    (``units`` is their sum, the units in use); where its backend queues permits (it offers
    "weighted") its ``waiters`` are listed too, each with its weight, else they are empty.
    """

    name: str
    fence: int
    """The last fencing token issued for this name (0 if it was never acquired)."""
    holder: Holder | None
    """None when nobody holds a live lease."""
    acquired_at: datetime.datetime | None
    """When the current holder acquired it, by the server's clock (UTC)."""
    ttl_left: float | None
    """Seconds until the current lease runs out, by the server's clock."""
    kind: str = "lock"
    """Which primitive this name belongs to: "lock", "semaphore", or for the queue that
    read-write and fair locks share, "fair" when each of its live leases and waiting places
    was made by a fair lock, else "rwlock" (a read-write lock's lease or waiter among them,
    or none live: a free name does not say which made it)."""
    limit: int | None = None
    """A semaphore's limit, as stored with its live permits (None for a lock)."""
    leases: tuple[LeaseInfo, ...] = ()
    """The live leases, oldest first: a lock's one lease, a semaphore's permits, a
    read-write lock's readers or writer."""
    value: str | None = None
    """The opaque value stored with a lock's live lease (an election's leader value), read
    in the same atomic step as holder and fence; None when there is none."""
    queued: int = 0
    """A queued primitive's (read-write, fair lock's, queued semaphore's) waiters holding a
    live place in its queue: the length of ``waiters`` whenever a backend lists them."""
    waiters: tuple[WaiterInfo, ...] = ()
    """A queued primitive's waiters holding a live place, in arrival order (the
    order they are served in): read in the same atomic step as the leases."""

    def __post_init__(self) -> None:
        if self.waiters and self.queued != len(self.waiters):
            object.__setattr__(self, "queued", len(self.waiters))
        # One shape for every kind: a store's converter describes a lock by its holder, and
        # the lease is filled in here, so that code reading leases has no case for locks.
        if not self.leases and self.holder is not None:
            lease = LeaseInfo(self.holder, self.acquired_at, self.ttl_left or 0.0, self.fence)
            object.__setattr__(self, "leases", (lease,))

    @property
    def held(self) -> bool:
        """Somebody holds a live lease on this name (a lock's holder, any permit)."""
        return bool(self.leases)

    @property
    def units(self) -> int:
        """The units the live leases take together: a semaphore's units in use (the sum of
        its permits' weights, at most ``limit``); the number of leases for other kinds."""
        return sum(lease.weight for lease in self.leases)

    @property
    def holders(self) -> tuple[LeaseInfo, ...]:
        """Every live lease, whatever the primitive (the same as ``leases``)."""
        return self.leases


def queue_kind(entries: int, fair_entries: int) -> str:
    """``LockInfo.kind`` of a read-write lock record with ``entries`` live leases and places,
    ``fair_entries`` of them a fair lock's: "fair" when all are (and there is one)."""
    return "fair" if entries and fair_entries == entries else Kind.RWLOCK.value


@dataclasses.dataclass(frozen=True, slots=True)
class Leader:
    """The leader of an election, read in one atomic step with its lease."""

    value: str | None
    term: int
    """The fence of the winning lease: strictly increases per election name."""
    holder: Holder
    since: datetime.datetime | None
    """When this leader won, by the server's clock (UTC)."""


@dataclasses.dataclass(frozen=True, slots=True)
class Grant:
    """The backend granted the lease; ``fence`` was written in the same atomic step."""

    fence: int
    age: float = dataclasses.field(default=0.0, compare=False)
    """Seconds before the acquire call that returned it that the granting request may have
    been sent: a grant made by an acquire the backend pipelined behind an earlier wait. The
    lock logic counts the lease from that earlier moment, so its deadline never outlasts the
    server's lease of exactly ``ttl``."""


@dataclasses.dataclass(frozen=True, slots=True)
class Busy:
    """Somebody else holds the lease for about ``ttl_left`` more seconds (None: unknown).
    What the server said, nothing more: whatever a waiting attempt keeps between its tries
    is its own (``tenure._async.store.AsyncAttempt``)."""

    ttl_left: float | None


@dataclasses.dataclass(frozen=True, slots=True)
class Renewal:
    """One lease to extend in a batch: the renewal scheduler sends many at once."""

    name: str
    token: str
    ttl: float
    kind: Kind = Kind.LOCK
    """Which kind of lease (their records are kept apart)."""


@dataclasses.dataclass(frozen=True, slots=True)
class Capabilities:
    """What a backend guarantees; the docs print this table for every backend."""

    fencing: str
    """What a fence means here, e.g. "strictly increasing per name"."""
    fences_survive_restart: bool
    """Fences never repeat or go back after the server restarts."""
    leases_survive_restart: bool
    """A lease held when the server restarts is still held afterwards."""
    wakeups: str
    """How waiters learn of a release: "notification", "in-process", or "back-off"."""
    multi_host: bool
    """Processes on different hosts coordinate through it."""
    fault_tolerant: bool
    """The lock survives the loss of one server (replication, quorum)."""
    lease_overrun: float = 0.0
    """Seconds a lease may outlive its ttl on the server: etcd's leases are whole seconds and
    its expiry check runs every 0.5 s, so up to 1.5 s. Clients judge their own lease by the
    exact ttl (``check()`` errs early, never late); waiters may wait this much longer."""
    fences_count_per_name: bool = True
    """A name's fences are its own counter (its first fence is 1). False: they are the
    store's revision at the grant (etcd's revision, ZooKeeper's zxid) or at least the
    server's clock in microseconds (so that they never go back when a record is cleaned up
    or lost), still strictly increasing per name, with gaps."""
