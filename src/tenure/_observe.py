"""What a lease does, told to logs, metrics and traces: one place for every event.

Logs: the ``tenure.lease`` logger says DEBUG for each acquisition (fence, seconds waited,
attempts), release, and timeout; ``tenure.renewer`` says DEBUG for each renewal round trip;
a loss is a WARNING on ``tenure.lease`` (an expected end, such as the ``max_renewals`` budget
spent or a lease not renewed running out, is INFO). Nothing is formatted unless the level is
enabled.

Metrics and spans go through the OpenTelemetry API when it is installed (``tenure[otel]``),
and cost nothing when it is not. With no SDK configured the API is a no-op; configure a
MeterProvider (a Prometheus exporter, OTLP...) to collect them. Instruments (meter ``tenure``):

- ``tenure.acquisitions`` (counter): acquire attempts that ended, by ``outcome``
  ("acquired", "busy": not acquired in time or not at all with ``blocking=False``).
- ``tenure.contention`` (counter): "held by someone else" answers received while acquiring.
- ``tenure.wait`` (histogram, seconds): from the start of an acquire to its grant or give-up.
- ``tenure.hold`` (histogram, seconds): from a grant to its release.
- ``tenure.renewals`` (counter): leases renewed by the watchdog, by ``outcome``
  ("renewed", "refused", "error").
- ``tenure.losses`` (counter): leases reported lost.

Every instrument carries ``tenure.backend`` (the URL scheme), ``tenure.primitive`` ("lock",
"semaphore") and ``tenure.name_prefix``: the name up to its first ``:`` (``orders:42`` ->
``orders``), so that per-entity names do not explode the number of series. Acquisitions also
open a span ``tenure.acquire`` with the same attributes, the full name, and the fence.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
from collections.abc import Iterator
from typing import Any, Protocol

from tenure._errors import ConfigurationError
from tenure._registry import unmet_floors


class _Spec(Protocol):
    @property
    def kind(self) -> str: ...


class _Backend(Protocol):
    def describe(self) -> str: ...


class AnyLease(Protocol):
    """What is read of a lease handle (either flavour)."""

    name: str
    labels: Labels | None

    @property
    def spec(self) -> _Spec: ...

    @property
    def store(self) -> _Backend: ...

__all__ = [
    "AnyLease",
    "Labels",
    "acquire_span",
    "acquired",
    "busy",
    "contended",
    "lost",
    "released",
    "renewal_batch",
]

_UNKNOWN = object()

lease_log = logging.getLogger("tenure.lease")
renewer_log = logging.getLogger("tenure.renewer")


SECONDS_BUCKETS = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
    1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 1800.0, 3600.0,
)
"""Bucket bounds advised for the wait and hold histograms, in seconds. OpenTelemetry's default
bounds (0, 5, 10, 25 ... 10000) are made for milliseconds: a handoff of 0.3 ms and a wait of
4 s would share the first bucket."""


def _seconds_histogram(meter: Any, name: str, description: str) -> Any:
    """A histogram in seconds with ``SECONDS_BUCKETS`` advised, where the installed API
    takes the advice (opentelemetry-api 1.23 and later; older ones use their defaults, and a
    view in the SDK can still set the bounds)."""
    try:
        return meter.create_histogram(
            name, unit="s", description=description,
            explicit_bucket_boundaries_advisory=SECONDS_BUCKETS,
        )
    except TypeError:
        return meter.create_histogram(name, unit="s", description=description)


class _Instruments:
    """The OpenTelemetry instruments, made once; None when the API is not installed."""

    def __init__(self) -> None:
        from opentelemetry import metrics, trace
        from opentelemetry.environment_variables import OTEL_PYTHON_TRACER_PROVIDER

        meter = metrics.get_meter("tenure")
        self.tracer = trace.get_tracer("tenure")
        self._trace = trace
        self._tracing = False
        """A tracer provider is configured: once set, the API never replaces it."""
        if OTEL_PYTHON_TRACER_PROVIDER in os.environ:
            trace.get_tracer_provider()  # the API loads a provider named there at first ask
        self.acquisitions = meter.create_counter(
            "tenure.acquisitions", unit="{acquisition}", description="acquire attempts ended"
        )
        self.contention = meter.create_counter(
            "tenure.contention", unit="{answer}", description="'held by another' answers"
        )
        self.wait = _seconds_histogram(
            meter, "tenure.wait", "time from acquire to grant or give-up"
        )
        self.hold = _seconds_histogram(meter, "tenure.hold", "time from grant to release")
        self.renewals = meter.create_counter(
            "tenure.renewals", unit="{renewal}", description="watchdog renewals"
        )
        self.losses = meter.create_counter(
            "tenure.losses", unit="{loss}", description="leases reported lost"
        )

    def tracing(self) -> bool:
        """Whether a tracer provider is configured. Until one is, the API's proxy hands out
        non-recording spans: making one costs several microseconds per acquire for nothing
        (the uncontended SQLite cycle is about 30 us), so none is made. Asked per acquire: a
        provider set later is used from then on.

        The API's getter looks its environment variable up on every call (about 0.5 us, a
        few percent of that cycle); the module global it answers from is read here instead,
        with the getter as the fallback should a release of the API rename it. A provider
        named by the environment variable was loaded when the instruments were made (when
        the first client was made); one named there only later is loaded by the first
        caller of the API's getter (the SDK's set-up, an instrumentation), not by tenure."""
        if self._tracing:
            return True
        provider = getattr(self._trace, "_TRACER_PROVIDER", _UNKNOWN)
        if provider is None:
            return False
        if provider is _UNKNOWN:
            provider = self._trace.get_tracer_provider()
        self._tracing = not isinstance(provider, self._trace.ProxyTracerProvider)
        return self._tracing


@functools.cache
def _instruments() -> _Instruments | None:
    unmet = unmet_floors("otel")
    if unmet:
        # Installed, so tenure would use it, but too old for the calls below: say so (at
        # connect, through ``prepare``) rather than fail inside an acquire.
        raise ConfigurationError(
            f"tenure reports metrics and spans through the OpenTelemetry API when it is "
            f"installed, and needs {', '.join(unmet)}: pip install -U 'tenure[otel]'"
        )
    try:
        return _Instruments()
    except ImportError:
        return None


def prepare() -> None:
    """Make the instruments now: importing the OpenTelemetry API takes 10-20 ms, which a
    client pays when it is made rather than inside its first acquire (with several
    processes starting together, that acquire's wait, and the waits of those behind it)."""
    _instruments()


class Labels:
    """A handle's metric attributes, and the acquisition outcomes' copies of them: made once
    per handle, not merged per acquire."""

    def __init__(self, lease: AnyLease) -> None:
        self.common = {
            "tenure.backend": lease.store.describe().partition("://")[0] or "custom",
            "tenure.primitive": lease.spec.kind,
            "tenure.name_prefix": lease.name.partition(":")[0],
        }
        self.acquired = {**self.common, "outcome": "acquired"}
        self.busy = {**self.common, "outcome": "busy"}


def labels(lease: AnyLease) -> Labels:
    """The handle's labels, made at its first event."""
    if lease.labels is None:
        lease.labels = Labels(lease)
    return lease.labels


_NO_SPAN: contextlib.AbstractContextManager[Any] = contextlib.nullcontext()


def acquire_span(lease: AnyLease) -> contextlib.AbstractContextManager[Any]:
    """A ``tenure.acquire`` span around one acquire, when OpenTelemetry is installed and a
    tracer provider configured; else a shared no-op (no generator made per acquire)."""
    instruments = _instruments()
    if instruments is None or not instruments.tracing():
        return _NO_SPAN
    return _span(instruments, lease)


@contextlib.contextmanager
def _span(instruments: _Instruments, lease: AnyLease) -> Iterator[Any]:
    with instruments.tracer.start_as_current_span(
        "tenure.acquire", attributes={**labels(lease).common, "tenure.name": lease.name}
    ) as span:
        yield span


def contended(lease: AnyLease) -> None:
    instruments = _instruments()
    if instruments is not None:
        instruments.contention.add(1, labels(lease).common)


def acquired(lease: AnyLease, fence: int, waited: float, attempts: int, span: Any) -> None:
    if lease_log.isEnabledFor(logging.DEBUG):
        lease_log.debug(
            "acquired %s %r: fence %d after %.3f s, %d attempt(s)",
            lease.spec.kind, lease.name, fence, waited, attempts,
        )
    instruments = _instruments()
    if instruments is not None:
        known = labels(lease)
        instruments.acquisitions.add(1, known.acquired)
        instruments.wait.record(waited, known.common)
        if span is not None:
            span.set_attribute("tenure.fence", fence)


def busy(lease: AnyLease, waited: float, attempts: int) -> None:
    """An acquire gave up: timed out, or found it held with ``blocking=False``."""
    if lease_log.isEnabledFor(logging.DEBUG):
        lease_log.debug(
            "not acquired %s %r after %.3f s, %d attempt(s)",
            lease.spec.kind, lease.name, waited, attempts,
        )
    instruments = _instruments()
    if instruments is not None:
        known = labels(lease)
        instruments.acquisitions.add(1, known.busy)
        instruments.wait.record(waited, known.common)


def released(lease: AnyLease, fence: int, held: float) -> None:
    if lease_log.isEnabledFor(logging.DEBUG):
        lease_log.debug(
            "released %s %r: fence %d after %.3f s held", lease.spec.kind, lease.name, fence, held
        )
    instruments = _instruments()
    if instruments is not None:
        instruments.hold.record(held, labels(lease).common)


def lost(lease: AnyLease, fence: int, reason: str, expected: bool) -> None:
    """A lease is gone. ``expected``: its own budget ended it (``max_renewals`` spent, or a
    lease that was not renewed ran out), which a caller asked for: INFO, not WARNING."""
    lease_log.log(
        logging.INFO if expected else logging.WARNING,
        "lost %s %r (fence %d): %s", lease.spec.kind, lease.name, fence, reason,
    )
    instruments = _instruments()
    if instruments is not None:
        instruments.losses.add(1, labels(lease).common)


def renewal_batch(lease: AnyLease, renewed: int, refused: int, failed: int) -> None:
    """One watchdog round trip for leases of one backend and primitive (``lease``: any one of
    them, for the labels)."""
    if renewer_log.isEnabledFor(logging.DEBUG):
        renewer_log.debug(
            "renewal round trip on %s: %d renewed, %d refused, %d failed",
            lease.store.describe(), renewed, refused, failed,
        )
    instruments = _instruments()
    if instruments is not None:
        common = labels(lease).common
        for outcome, count in (("renewed", renewed), ("refused", refused), ("error", failed)):
            if count:
                instruments.renewals.add(count, {**common, "outcome": outcome})
