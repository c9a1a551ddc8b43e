"""The metrics in the Prometheus text format, through the official ``prometheus_client``.

Extra ``jobchain[prometheus]`` (no OpenTelemetry needed). Embedding::

    metrics = PrometheusMetrics()
    client = await jobchain.connect(url, job_types=registry, observers=[metrics])
    with serve_prometheus(9464, registry=metrics.registry):
        async with Worker(client, processors) as worker, metrics.sample_queue(worker):
            await worker.wait()

``jobchain worker --metrics-port 9464`` does the same. The names are those of
:data:`jobchain.telemetry.names.METRICS` with dots as underscores, ``_seconds`` for
durations and ``_total`` for counters; labels ``job_type``, ``error_type``, ``outcome``,
``status`` and ``reason``.
"""

from __future__ import annotations

import errno
import threading
from collections.abc import Iterator
from types import TracebackType
from typing import Any
from wsgiref.simple_server import WSGIServer

from jobchain.errors import MetricsPortInUseError
from jobchain.telemetry import names
from jobchain.telemetry._extras import PROMETHEUS_EXTRA, MissingExtraError
from jobchain.telemetry.recorder import Labels, MetricsObserver

try:
    from prometheus_client import CollectorRegistry, Counter, Histogram, start_http_server
    from prometheus_client.core import GaugeMetricFamily, Metric
    from prometheus_client.registry import Collector
except ImportError:
    raise MissingExtraError(
        f"jobchain.telemetry.prometheus needs prometheus_client: pip install '{PROMETHEUS_EXTRA}'"
    ) from None

DEFAULT_METRICS_PORT = 9464
"""The port OpenTelemetry's Prometheus exporter uses by convention."""


def _labels(metric: names.Metric) -> list[str]:
    return [names.PROMETHEUS_LABELS[key] for key in metric.attributes]


class _ClientSink:
    """prometheus_client counters and histograms registered in ``registry``.

    Each labelled child is looked up once and kept: ``labels()`` takes a lock and builds a
    key on every call, a few microseconds a job on the worker's path.
    """

    def __init__(self, registry: CollectorRegistry) -> None:
        self._children: dict[tuple[str, Labels], Any] = {}
        self.counters: dict[str, Counter] = {}
        self.histograms: dict[str, Histogram] = {}
        for metric in names.METRICS:
            if metric.kind == "counter":
                self.counters[metric.name] = Counter(
                    metric.prometheus_name, metric.description, _labels(metric), registry=registry
                )
            elif metric.kind == "histogram":
                self.histograms[metric.name] = Histogram(
                    metric.prometheus_name,
                    metric.description,
                    _labels(metric),
                    registry=registry,
                    buckets=names.buckets(metric),
                )

    def add(self, metric: names.Metric, value: float, labels: Labels) -> None:
        child = self._children.get((metric.name, labels))
        if child is None:
            child = self._children[metric.name, labels] = self.counters[metric.name].labels(*labels)
        child.inc(value)

    def record(self, metric: names.Metric, value: float, labels: Labels) -> None:
        child = self._children.get((metric.name, labels))
        if child is None:
            child = self._children[metric.name, labels] = self.histograms[metric.name].labels(*labels)
        child.observe(value)


class _QueueGauges(Collector):
    """The queue gauges, read from the observer's sampler at each scrape."""

    def __init__(self, observer: MetricsObserver) -> None:
        self._observer = observer

    def collect(self) -> Iterator[Metric]:
        stats = self._observer.queue_stats()
        for metric in names.METRICS:
            if metric.kind != "gauge":
                continue
            family = GaugeMetricFamily(metric.prometheus_name, metric.description, labels=_labels(metric))
            if stats is not None:
                for value, labels in self._observer.gauge(metric):
                    family.add_metric(list(labels), value)
            yield family


class PrometheusMetrics(MetricsObserver):
    """jobchain's metrics as prometheus_client collectors in ``registry``.

    ``registry`` defaults to a new registry of its own (serve it with
    :func:`serve_prometheus`); pass ``prometheus_client.REGISTRY`` to join your process's
    default one. An observer: pass it to ``jobchain.connect(observers=[...])``, or let
    :meth:`sample_queue` attach it to a worker's client.
    """

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        super().__init__(_ClientSink(self.registry))
        self.registry.register(_QueueGauges(self))


class MetricsServer:
    """A running metrics endpoint (``GET /metrics``) on a daemon thread; :meth:`close` stops it."""

    def __init__(self, server: WSGIServer, thread: threading.Thread, host: str) -> None:
        self._server = server
        self._thread = thread
        self.host = host
        self.port: int = server.server_address[1]
        """The bound port (the real one when 0 was asked for)."""

    @property
    def url(self) -> str:
        host = "127.0.0.1" if self.host in ("", "0.0.0.0") else self.host
        host = f"[{host}]" if ":" in host else host
        return f"http://{host}:{self.port}/metrics"

    def close(self) -> None:
        """Stop serving and release the port (idempotent)."""
        if self._thread.is_alive():
            self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> MetricsServer:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def serve_prometheus(
    port: int = DEFAULT_METRICS_PORT, host: str = "0.0.0.0", *, registry: CollectorRegistry | None = None
) -> MetricsServer:
    """Serve ``registry`` (default: prometheus_client's global one) at ``http://host:port/metrics``.

    Returns the running :class:`MetricsServer` (close it, or use it as a context manager).
    Port 0 picks a free port (``server.port``). Raises MetricsPortInUseError naming the port
    when it is taken.
    """
    from prometheus_client import REGISTRY

    try:
        server, thread = start_http_server(
            port, addr=host, registry=registry if registry is not None else REGISTRY
        )
    except OSError as error:
        if error.errno == errno.EADDRINUSE:
            raise MetricsPortInUseError(port, host) from None
        raise
    return MetricsServer(server, thread, host)


__all__ = ["DEFAULT_METRICS_PORT", "MetricsServer", "PrometheusMetrics", "serve_prometheus"]
