"""The metrics through the OpenTelemetry metrics API (extra ``jobchain[otel]``)."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from jobchain.telemetry._extras import OTEL_EXTRA, MissingExtraError

try:
    from opentelemetry.metrics import (
        CallbackOptions,
        Counter,
        Histogram,
        Meter,
        MeterProvider,
        Observation,
        get_meter,
    )
except ImportError:
    raise MissingExtraError(
        f"jobchain.telemetry.otel_metrics needs opentelemetry-api: pip install '{OTEL_EXTRA}'"
    ) from None

from jobchain.telemetry import names
from jobchain.telemetry.recorder import Labels, MetricsObserver

try:
    from importlib.metadata import version

    _VERSION = version("jobchain")
except Exception:  # an uninstalled checkout
    _VERSION = "0"


class _MeterSink:
    """Counters and histograms of one meter, created from :data:`~jobchain.telemetry.names.METRICS`."""

    def __init__(self, meter: Meter) -> None:
        self._attributes: dict[tuple[str, Labels], dict[str, str]] = {}
        self._error_types = names.ErrorTypeBound()  # and so this cache stays bounded too
        self.counters: dict[str, Counter] = {}
        self.histograms: dict[str, Histogram] = {}
        for metric in names.METRICS:
            if metric.kind == "counter":
                self.counters[metric.name] = meter.create_counter(
                    metric.name, unit=metric.unit, description=metric.description
                )
            elif metric.kind == "histogram":
                buckets = names.buckets(metric)
                self.histograms[metric.name] = meter.create_histogram(
                    metric.name,
                    unit=metric.unit,
                    description=metric.description,
                    explicit_bucket_boundaries_advisory=list(buckets),
                )

    def attributes(self, metric: names.Metric, labels: Labels) -> dict[str, str]:
        """The attribute dict of ``labels`` (built once per metric and labels), its
        ``error.type`` bounded like the Prometheus export's."""
        labels = self._error_types.labels(metric, labels)
        found = self._attributes.get((metric.name, labels))
        if found is None:
            found = self._attributes[metric.name, labels] = dict(zip(metric.attributes, labels, strict=True))
        return found

    def add(self, metric: names.Metric, value: float, labels: Labels) -> None:
        self.counters[metric.name].add(value, self.attributes(metric, labels))

    def record(self, metric: names.Metric, value: float, labels: Labels) -> None:
        self.histograms[metric.name].record(value, self.attributes(metric, labels))


class OpenTelemetryMetrics(MetricsObserver):
    """jobchain's metrics through the OpenTelemetry metrics API.

    ``meter_provider`` defaults to the global one (configure it with the SDK and an exporter
    first). An observer: pass it to ``jobchain.connect(observers=[...])``; in a worker
    process, ``async with metrics.sample_queue(worker):`` adds the queue gauges.
    """

    def __init__(self, meter_provider: MeterProvider | None = None) -> None:
        meter = get_meter("jobchain", _VERSION, meter_provider=meter_provider)
        super().__init__(_MeterSink(meter))
        for metric in names.METRICS:
            if metric.kind == "gauge":
                meter.create_observable_gauge(
                    metric.name,
                    callbacks=[self._observe(metric)],
                    unit=metric.unit,
                    description=metric.description,
                )

    def _observe(self, metric: names.Metric) -> Callable[[CallbackOptions], Iterable[Observation]]:
        def callback(_options: CallbackOptions) -> Iterable[Observation]:
            return [
                Observation(value, dict(zip(metric.attributes, labels, strict=True)))
                for value, labels in self.gauge(metric)
            ]

        return callback
