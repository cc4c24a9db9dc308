"""The one line between the lease logic and a backend: a store of leases keyed by what is
leased.

Every primitive is leases under a name. What an acquire asks for is data, a ``LeaseSpec``
(the kind, and the limit, mode, value or queue lease that kind takes), so a backend writes
each verb once for every kind, and a new primitive that is a new rule over leases adds a
case to the verbs, not new verbs. The verbs, each ONE atomic step on the server judged by
the server's clock and comparing the caller's random token there:

- ``acquire``: take a lease of ``spec`` if the kind's rule grants it (a retry with the same
  token keeps its fence), else say how long the soonest holder has left;
- ``release``, ``extend_many``, ``owned``: about one held lease (a batch, for extend);
  ``release_after``: a release that leaves the name held a while (``hold_at_least``), by
  default one extend to what is left of the window;
- ``inspect``, ``list_records``, ``break_leases``: the operator's views and force-release;
- ``set_value``: replace the value stored with a held lock lease (elections).

Waiting is the backend's too: ``attempt`` makes an ``AsyncAttempt``, the state of one
acquire call's tries (a queued place, a subscription, an answer pipelined behind a wait),
which the lease logic drives with ``try_once`` / ``wait`` / ``leave`` and never looks into.
The default attempt polls (the lease logic's back-off paces it); a backend that hears of
releases overrides ``wait``.

What a backend offers is data (``offers``, beside ``refusals``): ``supports()``, the
guarantees table and the test matrix read it from here. Errors: each backend names its
driver's failures in ``driver_errors``; the base wraps every verb (and every attempt step)
so that such an error leaves as ONE kind of ``BackendError`` that names the backend (its URL
redacted), the action and the lock, with the driver's error as its cause.
Written for asyncio; ``scripts/unasync.py`` generates the threads flavour.
"""

from __future__ import annotations

import abc
import functools
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, ClassVar

from tenure._concurrency import async_io as io
from tenure._errors import BackendError, StoreFault, TenureError
from tenure._types import Busy, Capabilities, Grant, Holder, Kind, LeaseSpec, LockInfo, Renewal

__all__ = [
    "EVERY_PRIMITIVE",
    "PRIMITIVES",
    "WITH_WEIGHTS",
    "AsyncAttempt",
    "AsyncStore",
    "extend_by_kind",
    "failure",
]

PRIMITIVES = ("lock", "semaphore", "election", "rwlock", "fair", "weighted")
"""What a store may offer: the kinds' public faces (a fair lock is the write side of a
read-write lock; an election is a lock whose lease carries a value) and "weighted":
semaphore permits of any weight (``LeaseSpec.weight``) queued in arrival order
(``LeaseSpec.queue_ttl``), granted while the units of the live permits, plus the weights of
the live places ahead of the attempt, plus its own weight stay within the limit. A store
without it grants permits of weight 1 alone, unqueued."""
EVERY_PRIMITIVE = frozenset(PRIMITIVES) - {"weighted"}
"""``offers`` of a store that implements every primitive (weighted permits are offered by
the stores that have them: ``WITH_WEIGHTS``)."""
WITH_WEIGHTS = EVERY_PRIMITIVE | {"weighted"}
"""``offers`` of a store that implements every primitive and weighted FIFO permits."""

Answers = list[bool]
"""A batch's answers, in the order asked."""

ACTIONS: Mapping[str, str] = {
    "acquire": "acquire",
    "quick_try": "acquire",
    "release": "release",
    "release_after": "release",
    "extend_many": "extend",
    "owned": "ownership check",
    "inspect": "inspect",
    "list_records": "list",
    "break_leases": "break",
    "set_value": "set value",
    "aclose": "close",
    "try_once": "acquire",
    "try_or_wait": "acquire",
    "wait": "wait",
    "leave": "leaving the queue",
}
"""How a BackendError names each verb's action."""


def failure(
    where: str, action: str, subject: str, error: BaseException, detail: str | None = None
) -> BackendError:
    """The one way a store's failure reads: backend (redacted URL), action, lock, cause
    (``detail``: the cause as the store's ``error_detail`` reads it; else its text)."""
    detail = detail or str(error) or type(error).__name__
    return BackendError(f"{where}: {action} of {subject} failed: {detail}")


def _subject(verb: str, args: tuple[Any, ...]) -> str:
    """The lock a verb was about, from its arguments (the name; a batch's first name)."""
    if verb == "extend_many":
        renewals: Sequence[Renewal] = args[0] if args else ()
        if not renewals:
            return "no lease"
        more = f" and {len(renewals) - 1} more" if len(renewals) > 1 else ""
        return f"{renewals[0].name!r}{more}"
    if verb == "aclose":
        return "the connections"
    if verb == "list_records":
        return f"the names under {args[1]!r}" if len(args) > 1 else "the names"
    if verb in ("release", "release_after", "owned", "inspect", "break_leases"):
        return repr(args[1]) if len(args) > 1 else "?"
    return repr(args[0]) if args else "?"


def _translating(verb: str, function: Callable[..., Any]) -> Callable[..., Any]:
    """``function`` (a store verb or an attempt step) with its driver's failures, and the
    ``StoreFault`` it raises itself, raised as ``failure``. An attempt's subject is its own
    name; a verb's, its arguments'."""
    action = ACTIONS[verb]

    @functools.wraps(function)
    async def translated(self: AsyncStore | AsyncAttempt, *args: Any, **kwargs: Any) -> Any:
        try:
            return await function(self, *args, **kwargs)
        except TenureError:
            raise
        except BaseException as exc:
            # (Which store, found only on the way out: every acquire and release pass here.)
            store = self.store if isinstance(self, AsyncAttempt) else self
            if not isinstance(exc, store.translated_errors):
                raise
            subject = (repr(self.name) if isinstance(self, AsyncAttempt)
                       else _subject(verb, args))
            raise failure(
                store.describe(), action, subject, exc, store.error_detail(exc)
            ) from exc

    translated.__translated__ = True  # type: ignore[attr-defined]
    return translated


def _wrap_verbs(cls: type, verbs: Sequence[str], wrap: Callable[..., Any]) -> None:
    for verb in verbs:
        function = cls.__dict__.get(verb)
        if function is not None and not getattr(function, "__translated__", False):
            setattr(cls, verb, wrap(verb, function))


async def extend_by_kind(
    renewals: Sequence[Renewal],
    extend: Callable[[Kind, Sequence[Renewal]], Awaitable[Answers]],
) -> Answers:
    """``extend_many`` for a store whose kinds' records are renewed apart: one ``extend``
    call per kind in the batch, the answers in the order asked."""
    kinds = list(dict.fromkeys(renewal.kind for renewal in renewals))
    if len(kinds) <= 1:
        return await extend(kinds[0] if kinds else Kind.LOCK, renewals)
    answers: dict[int, bool] = {}
    for kind in kinds:
        indexes = [i for i, renewal in enumerate(renewals) if renewal.kind == kind]
        batch = await extend(kind, [renewals[i] for i in indexes])
        answers.update(zip(indexes, batch, strict=True))
    return [answers[i] for i in range(len(renewals))]


class AsyncAttempt:
    """One acquire call's tries at one lease, and whatever the backend keeps between them.

    The lease logic calls ``try_once`` (or ``try_or_wait`` first, where ``combines_try_and_wait``),
    ``wait`` between refused tries, and ``leave`` once if it gives up while ``holds_place``.
    This default polls: each try is the store's ``acquire``, a wait sleeps, and a queued
    kind leaves its place by releasing its token (which removes a place as well as a lease).
    """

    combines_try_and_wait: ClassVar[bool] = False
    """``try_or_wait`` may answer: a blocking acquire's first try goes through it."""

    quick_tried = False
    """Set by the lease logic when this attempt was made after the store's ``quick_try``
    answered None for the same acquire call, a moment before: its first ``try_once`` may
    skip whatever that quick try found out already (SQLite's one-statement grant, which
    was refused)."""

    def __init__(
        self, store: AsyncStore, name: str, spec: LeaseSpec, *, token: str, ttl: float,
        holder: Holder,
    ) -> None:
        self.store = store
        self.name = name
        self.spec = spec
        self.token = token
        self.ttl = ttl
        self.holder = holder

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        _wrap_verbs(cls, ("try_once", "try_or_wait", "wait", "leave"), _translating)

    async def try_once(self) -> Grant | Busy:
        """One try: the store's ``acquire``."""
        return await self.store.acquire(self.name, self.spec, self.token, self.ttl, self.holder)

    async def try_or_wait(self, wait: float) -> Grant | Busy | None:
        """A try and, if refused, a wait of up to ``wait`` seconds and a second try whose
        answer the next ``try_once`` hands over, in one round trip; None: not offered now
        (the lease logic makes a plain try)."""
        return None

    async def wait(self, timeout: float, busy: Busy) -> None:
        """Return when the lease may have been freed, or after ``timeout`` seconds
        (``busy``: the refusal just received). Spurious returns are fine. Called before any
        try (an election's observer watching for a change), it must take nothing: no lease,
        no place, no wake-up meant for a waiter."""
        await io.sleep(self.before_place_lapses(timeout))

    def before_place_lapses(self, timeout: float) -> float:
        """``timeout``, cut so that a queued waiter's next try (which refreshes its place)
        comes before the place lapses, whatever the back-off wanted: every wait is bounded
        by this."""
        if self.spec.queues and self.spec.queue_ttl is not None:
            return min(timeout, self.spec.queue_ttl / 3)
        return timeout

    @property
    def holds_place(self) -> bool:
        """Giving up must ``leave``: a queued kind refused at least once (it may also hold a
        place from a try whose answer never came, so any queued attempt counts)."""
        return self.spec.queues

    @property
    def leaves_at_once(self) -> bool:
        """``leave`` runs before the acquire answers (queued kinds, whose places block other
        waiters, and local stores, whose calls cannot hang); else in the background."""
        return self.spec.queues or self.store.local

    async def leave(self) -> None:
        """Give up without the lease: leave any queue this attempt joined."""
        if self.spec.queues:
            await self.store.release(self.spec.kind, self.name, self.token)


class AsyncStore(abc.ABC):
    """A backend: leases of every kind it ``offers``, each verb one atomic server step."""

    schemes: ClassVar[tuple[str, ...]]
    """The URL schemes this backend serves."""
    capabilities: ClassVar[Capabilities]
    offers: ClassVar[frozenset[str]] = frozenset({"lock"})
    """The primitives (``PRIMITIVES``) this backend implements."""
    refusals: ClassVar[Mapping[str, str]] = {}
    """Primitives this backend refuses, each with the reason the client's ConfigurationError
    gives; one neither offered nor refused is simply not built."""
    driver_errors: ClassVar[tuple[type[BaseException], ...]] = (OSError,)
    """The driver's exceptions that mean the store failed (connection, timeout, server
    error): raised from any verb as a ``BackendError`` (``failure``), as is a
    ``StoreFault`` the store raises itself. Empty: no verb is wrapped (nor may raise
    ``StoreFault``)."""
    translated_errors: ClassVar[tuple[type[BaseException], ...]] = (StoreFault, OSError)
    """What the wrapped verbs translate: ``StoreFault`` and the ``driver_errors`` (set from
    them for each subclass)."""
    max_backoff: ClassVar[float] = 0.05
    """Longest pause between two tries when no notification arrives (seconds)."""
    local: ClassVar[bool] = False
    """The store is in this process or a file on this host (memory, SQLite): no call that
    can hang, so an acquire's deadline needs no guard around each call."""
    attempt_class: ClassVar[type[AsyncAttempt]] = AsyncAttempt
    """What each acquire call's tries run in: the default polls with back-off; a wing that
    waits another way (a notification, a queue place) names its own subclass."""
    notifies: ClassVar[bool] = False
    """The attempts' ``wait`` returns as soon as a release is announced: a waiter then
    waits ``max_backoff`` at once instead of polling up from 1 ms."""
    quick_tries: ClassVar[bool] = False
    """The store has a ``quick_try`` of its own (set for each subclass): the lease logic
    calls none that would answer None at once (under asyncio, a task per acquire)."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.quick_tries = cls.quick_try is not AsyncStore.quick_try
        cls.translated_errors = (StoreFault, *cls.driver_errors)
        if cls.driver_errors:  # (none to translate, as memory's: no wrapper on its hot path)
            _wrap_verbs(cls, ("acquire", "quick_try", "release", "release_after",
                              "extend_many", "owned", "inspect", "list_records",
                              "break_leases", "set_value", "aclose"),
                        _translating)

    @classmethod
    @abc.abstractmethod
    def from_url(cls, url: str, **options: Any) -> AsyncStore:
        """Build from a URL and ``connect()``'s keyword options; ConfigurationError for a
        malformed URL or an unknown option. Connecting lazily is fine."""

    def attempt(
        self, name: str, spec: LeaseSpec, token: str, ttl: float, holder: Holder
    ) -> AsyncAttempt:
        """The state of one acquire call's tries: an ``attempt_class``."""
        return self.attempt_class(self, name, spec, token=token, ttl=ttl, holder=holder)

    async def quick_try(
        self, name: str, spec: LeaseSpec, token: str, ttl: float, holder: Holder
    ) -> Grant | None:
        """An acquire call's first chance, taken before its attempt is made: most acquires
        are granted at once, and then no attempt (nor the rest of the acquire's machinery)
        is made at all. ``Grant``: the lease, as ``acquire`` grants it (its fence, its
        expiry, the spec's rule). None: not granted, and nothing a later try would see was
        changed (no place taken, no wake-up consumed): the lease logic then makes the
        attempt, whose first ``try_once`` is a full try (told ``quick_tried``).

        The lease logic calls it only where that first try would be unbounded (a ``local``
        store, or an acquire without a deadline), and a store whose attempts combine a try
        with a wait (``combines_try_and_wait``) or keep state from their first try on
        leaves it alone. This default answers None without sending anything, and is never
        called (``quick_tries``)."""
        return None

    @abc.abstractmethod
    async def acquire(
        self, name: str, spec: LeaseSpec, token: str, ttl: float, holder: Holder
    ) -> Grant | Busy:
        """Take a lease of ``spec`` on ``name`` if the kind's rule grants it, in ONE step.

        Expired leases (and lapsed places) are dropped first. ``token`` already holds a live
        lease (a retry after a lost reply): reset its expiry, keep its fence, return it.
        Grantable (a lock: no live lease; a semaphore: fewer than ``limit`` permits, the
        stored limit ruling while permits live, another raising ``limit_mismatch``; a
        queued semaphore, on a store that offers "weighted": the units of the live permits
        plus the weights of the live places ahead of this one (every live place, for an
        attempt without one) plus ``spec.weight`` at most ``limit``; a queued mode: by the
        arrival rule, see ``capabilities`` of the read-write lock): store the lease (token,
        server now + ttl, holder, the name's next fence, the value) and return
        ``Grant(fence)``. Otherwise change nothing but a queued kind's place (added at the
        tail, or refreshed for ``queue_ttl``) and return ``Busy(ttl_left)``.
        """

    @abc.abstractmethod
    async def release(self, kind: Kind, name: str, token: str) -> bool:
        """End ``token``'s live lease (or remove its waiting place: then False) and wake
        waiters; False if it was no longer live. Fences never go back."""

    async def release_after(self, kind: Kind, name: str, token: str, seconds: float) -> bool:
        """End ``token``'s live lease for its holder but leave the name held ``seconds``
        more by the server's clock, in ONE step: ``inspect`` shows the same holder and
        fence until then, contenders are refused, and then the lease expires as any
        unrenewed one does (its holder's process may have exited by then). False if it was
        no longer live. The lease logic calls it only for a release inside a lock's
        ``hold_at_least`` window, after its renewals stopped (none is out).

        This default resets the lease's expiry to server now + ``seconds`` with
        ``extend_many`` (shorter or longer than its ttl: every store's extend sets, never
        adds); a store that keeps local state per grant, or whose leases die with its
        session or need more than a majority's word, overrides it."""
        return (await self.extend_many([Renewal(name, token, seconds, kind)]))[0]

    @abc.abstractmethod
    async def extend_many(self, renewals: Sequence[Renewal]) -> list[bool]:
        """Reset each live lease's expiry to server now + its ttl (each ``Renewal`` says its
        kind), in as few round trips as the backend can; False for one no longer live."""

    @abc.abstractmethod
    async def owned(self, kind: Kind, name: str, token: str) -> bool:
        """Whether ``token`` holds a live lease of ``kind`` on ``name`` right now."""

    @abc.abstractmethod
    async def inspect(self, kind: Kind, name: str) -> LockInfo | None:
        """The record of ``name`` (fence, live leases oldest first, limit, value, queue);
        None if it was never used."""

    @abc.abstractmethod
    async def list_records(self, kind: Kind, prefix: str) -> list[LockInfo]:
        """Every known ``kind`` record whose name starts with ``prefix``, by name; never
        blocking the server (SCAN, never KEYS)."""

    @abc.abstractmethod
    async def break_leases(self, kind: Kind, name: str) -> bool:
        """Operator's force-release of every live lease of ``name`` (a queue stays); True if
        any was live. Keeps the fence, wakes waiters."""

    async def set_value(self, name: str, token: str, value: str) -> bool:
        """Replace the value stored with ``token``'s live lock lease, in one step; False if
        it is not live. Only for stores that offer elections."""
        raise NotImplementedError(f"{type(self).__name__} stores no lease values")

    # ---- what the store's connection says about leases, locally ---------------------------

    @property
    def setup_seconds(self) -> float:
        """Seconds spent on connection set-ups its servers completed (see
        ``tenure._concurrency.setup_time``): a call that overruns its bound gets this more."""
        return 0.0

    def unanswered(self, seconds: float) -> BaseException:
        """The cause of the BackendError the lease logic raises when its own deadline, not
        the driver, ended a call: the driver's last error where the backend knows it."""
        return TimeoutError(
            f"{self.describe()}: no answer within {seconds:.3f} s (the driver was still "
            "trying when the caller's deadline came)"
        )

    @property
    def lease_horizon(self) -> float | None:
        """Seconds a lease can be vouched for after the server last confirmed it, whatever
        its ttl (a share of a session timeout where leases die with a session); None: the
        ttl alone bounds it."""
        return None

    def lease_doubt(self, kind: Kind, name: str, token: str) -> str | None:
        """Why ``token``'s lease may be gone already though its ttl has not run out (its
        session was suspended or ended), from local knowledge only; None otherwise."""
        return None

    def add_doubt_listener(self, listener: Callable[[], object]) -> None:  # noqa: B027
        """Call ``listener`` whenever ``lease_doubt`` may have started answering. A no-op
        for a store without sessions."""

    def renewal_store(self) -> AsyncStore:
        """The store the asyncio renewal thread renews through: this one where its calls bind
        nothing to the caller's loop, else a twin with its own connections."""
        return self

    async def aclose(self) -> None:  # noqa: B027 - optional hook, a no-op by default
        """Close connections. The store must not be used afterwards."""

    def describe(self) -> str:
        """The backend's URL without credentials, for messages and ``tenure`` output."""
        return type(self).__name__

    def error_detail(self, error: BaseException) -> str:
        """How a driver's ``error`` reads as the cause in a BackendError: its text. A store
        whose driver writes pages (a topology dump) shortens it; ``__cause__`` keeps it whole."""
        return str(error) or type(error).__name__
