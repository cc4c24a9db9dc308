"""Logs, metrics and spans of leases: a contended run read back from OpenTelemetry's
in-memory reader and span exporter, and the ``tenure.lease`` log records."""

from __future__ import annotations

import inspect
import logging
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import tenure

# Fast and the only user of the otel extra: scripts/floors runs it at the lowest release.
pytestmark = pytest.mark.smoke

READER = InMemoryMetricReader()
SPANS = InMemorySpanExporter()


@pytest.fixture(scope="module", autouse=True)
def providers() -> Iterator[None]:
    # The global providers can be set once per process; tenure's instruments, made through
    # the API's proxies, start reporting to them from then on.
    metrics.set_meter_provider(MeterProvider(metric_readers=[READER]))
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(SPANS))
    trace.set_tracer_provider(tracer_provider)
    yield


def points(prefix: str) -> dict[str, list[Any]]:
    """Every data point of tenure's instruments whose name prefix label is ``prefix``."""
    found: dict[str, list[Any]] = {}
    data = READER.get_metrics_data()
    assert data is not None
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                for point in metric.data.data_points:
                    if point.attributes.get("tenure.name_prefix") == prefix:
                        found.setdefault(metric.name, []).append(point)
    return found


def total(found: dict[str, list[Any]], metric: str, **labels: str) -> float:
    return sum(
        point.value
        for point in found.get(metric, [])
        if all(point.attributes.get(k) == v for k, v in labels.items())
    )


def test_contended_run_is_counted_and_one_loss_reported() -> None:
    workers, rounds = 4, 5
    with tenure.connect("memory://observe") as locks:

        def work() -> None:
            for _ in range(rounds):
                with locks.lock("contended:k", ttl=5, timeout=10):
                    time.sleep(0.002)

        threads = [threading.Thread(target=work) for _ in range(workers)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        holder = locks.lock("contended:k", ttl=5)
        assert holder.acquire()
        assert locks.lock("contended:k", ttl=5).acquire(blocking=False) is False
        holder.release()
        lost = threading.Event()
        short = locks.lock("contended:short", ttl=0.2, on_lost=lambda _lock: lost.set())
        assert short.acquire()
        assert lost.wait(3)

    found = points("contended")
    granted = workers * rounds + 2
    assert total(found, "tenure.acquisitions", outcome="acquired") == granted
    assert total(found, "tenure.acquisitions", outcome="busy") == 1
    assert total(found, "tenure.contention") >= 1
    waits = found["tenure.wait"]
    assert sum(point.count for point in waits) == granted + 1
    holds = found["tenure.hold"]
    assert sum(point.count for point in holds) == workers * rounds + 1
    assert total(found, "tenure.losses") == 1
    for point in found["tenure.acquisitions"]:
        assert point.attributes["tenure.backend"] == "memory"
        assert point.attributes["tenure.primitive"] == "lock"
    spans = [s for s in SPANS.get_finished_spans() if s.name == "tenure.acquire"]
    fences = [s.attributes.get("tenure.fence") for s in spans
              if s.attributes.get("tenure.name") == "contended:k"]
    assert len(fences) == workers * rounds + 2  # every acquire, granted or not, has a span
    granted_fences = [f for f in fences if f is not None]
    # Every grant its own fence (they increase with gaps: each is at least the clock).
    assert len(set(granted_fences)) == len(granted_fences) == workers * rounds + 1


def test_renewals_and_semaphores_are_labelled() -> None:
    with tenure.connect("memory://observe") as locks:
        permit = locks.semaphore("renewed:s", limit=2, ttl=0.3, renew=True)
        assert permit.acquire()
        time.sleep(0.5)
        permit.release()
    found = points("renewed")
    assert total(found, "tenure.renewals", outcome="renewed") >= 2
    for point in found["tenure.acquisitions"]:
        assert point.attributes["tenure.primitive"] == "semaphore"


def test_log_records(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="tenure")
    with tenure.connect("memory://observe") as locks:
        lock = locks.lock("logged:k", ttl=0.2, renew=True, max_renewals=0)
        assert lock.acquire()
        fence = lock.fence
        assert lock.lost.wait(3)
    messages = [(r.name, r.levelno, r.getMessage()) for r in caplog.records]
    assert any(
        name == "tenure.lease" and level == logging.DEBUG
        and f"acquired lock 'logged:k': fence {fence}" in text
        for name, level, text in messages
    ), messages
    # The renewal budget ending the lease is what was asked for: INFO, not WARNING.
    assert any(
        name == "tenure.lease" and level == logging.INFO and "lost lock 'logged:k'" in text
        for name, level, text in messages
    ), messages


def test_an_unexpected_loss_is_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="tenure")
    with tenure.connect("memory://observe") as locks:
        lock = locks.lock("broken:k", ttl=0.6, renew=True)
        assert lock.acquire()
        assert locks.break_lock("broken:k")
        assert lock.lost.wait(3)
    assert any(
        r.name == "tenure.lease" and r.levelno == logging.WARNING and "broken:k" in r.getMessage()
        for r in caplog.records
    )


def test_time_histograms_have_buckets_for_seconds() -> None:
    with tenure.connect("memory://buckets") as locks, locks.lock("bucketed:a", ttl=5):
        pass
    waits = points("bucketed")["tenure.wait"]
    advice = inspect.signature(metrics.Meter.create_histogram).parameters
    if "explicit_bucket_boundaries_advisory" not in advice:
        # opentelemetry-api < 1.23 (the floors run) takes no advice: its defaults apply.
        assert waits[0].count == 1
        return
    # OpenTelemetry's default bounds start at 5: a sub-millisecond grant would share it
    # with everything up to 5 s.
    assert list(waits[0].explicit_bounds)[:3] == [0.0005, 0.001, 0.0025]


def test_the_per_acquire_tracing_check_reads_the_apis_provider_global() -> None:
    # tenure._observe asks per acquire whether tracing is configured by reading the global
    # that trace.get_tracer_provider() answers from (the getter looks an environment variable
    # up on every call). Were a release of the API to rename it, tenure would fall back to
    # the getter, correct but slower: this test says so, at the floors and at the newest API.
    assert trace._TRACER_PROVIDER is trace.get_tracer_provider()  # set by the fixture
