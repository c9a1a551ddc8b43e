"""The notify-delivery metrics (issue 36, deliver 7): a gauge that is 1 while the notify
backend's own delivery self-check reports notifications lost, and a counter of the times it
turned degraded, both driven by the client's ``notify_degraded`` / ``notify_recovered``
events. The self-check is the in-process adapter with a hand-driven verdict, so every change
happens exactly when the test says."""

from __future__ import annotations

from collections.abc import Callable

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from jobchain import Client, JobTypes
from jobchain.memory.notify import MemoryNotifyAdapter
from jobchain.memory.state import MemoryStateAdapter
from jobchain.telemetry import OpenTelemetryMetrics
from jobchain.telemetry.prometheus import PrometheusMetrics

from .support import metric_points

Reader = tuple[MeterProvider, InMemoryMetricReader]


class SelfChecking(MemoryNotifyAdapter):
    """The in-process adapter with a delivery self-check (ChecksDelivery) the test decides."""

    degraded = False
    degraded_reason: str | None = None

    def __init__(self) -> None:
        super().__init__()
        self.watchers: list[Callable[[bool, str | None], None]] = []

    async def check_delivery(self) -> bool:
        return not self.degraded

    def watch_delivery(self, watcher: Callable[[bool, str | None], None]) -> Callable[[], None]:
        self.watchers.append(watcher)
        return lambda: self.watchers.remove(watcher)

    def verdict(self, degraded: bool) -> None:
        self.degraded = degraded
        self.degraded_reason = "no probe within 2 s" if degraded else None
        for watcher in self.watchers:
            watcher(degraded, self.degraded_reason)


def _scrape(metrics: PrometheusMetrics) -> dict[str, float]:
    text = generate_latest(metrics.registry).decode()
    return {
        sample.name: sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name.startswith("jobchain_notify_")
    }


async def test_prometheus_shows_a_degraded_delivery_while_it_lasts_and_counts_degradations() -> None:
    notify = SelfChecking()
    metrics = PrometheusMetrics()
    async with Client(MemoryStateAdapter(), notify, JobTypes(), observers=[metrics]):
        healthy = _scrape(metrics)
        notify.verdict(True)
        degraded = _scrape(metrics)
        notify.verdict(False)
        recovered = _scrape(metrics)
        notify.verdict(True)
        again = _scrape(metrics)
    # Reported from the start (an alert on "== 1" needs the 0 before the first change).
    assert healthy == {"jobchain_notify_degraded": 0, "jobchain_notify_degradations_total": 0}
    assert degraded == {"jobchain_notify_degraded": 1, "jobchain_notify_degradations_total": 1}
    assert recovered == {"jobchain_notify_degraded": 0, "jobchain_notify_degradations_total": 1}
    assert again == {"jobchain_notify_degraded": 1, "jobchain_notify_degradations_total": 2}


async def test_opentelemetry_shows_the_same_gauge_and_counter(metric_reader: Reader) -> None:
    provider, reader = metric_reader
    notify = SelfChecking()
    metrics = OpenTelemetryMetrics(meter_provider=provider)

    def values(name: str) -> list[object]:
        return [point.value for _, point in metric_points(reader, name)]  # type: ignore[attr-defined]

    async with Client(MemoryStateAdapter(), notify, JobTypes(), observers=[metrics]):
        assert values("jobchain.notify.degraded") == [0]
        notify.verdict(True)
        assert values("jobchain.notify.degraded") == [1]
        assert values("jobchain.notify.degradations") == [1]
        notify.verdict(False)
        assert values("jobchain.notify.degraded") == [0]
        assert values("jobchain.notify.degradations") == [1]
