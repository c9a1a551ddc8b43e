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
``status`` and ``reason``. ``error_type`` keeps the first
:data:`~jobchain.telemetry.names.MAX_ERROR_TYPES` exception classes seen; later ones are
counted as ``other``.

The endpoint has no authentication: :func:`serve_prometheus` listens on 127.0.0.1 unless
given another address.
"""

from __future__ import annotations

import errno
import threading
from bisect import bisect_left
from collections.abc import Iterator
from itertools import accumulate
from types import TracebackType
from wsgiref.simple_server import WSGIServer

from jobchain.errors import MetricsPortInUseError
from jobchain.telemetry import names
from jobchain.telemetry._extras import PROMETHEUS_EXTRA, MissingExtraError
from jobchain.telemetry.recorder import Labels, MetricsObserver

try:
    from prometheus_client import CollectorRegistry, start_http_server
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
    from prometheus_client.registry import Collector
except ImportError:
    raise MissingExtraError(
        f"jobchain.telemetry.prometheus needs prometheus_client: pip install '{PROMETHEUS_EXTRA}'"
    ) from None

DEFAULT_METRICS_PORT = 9464
"""The port OpenTelemetry's Prometheus exporter uses by convention."""


def _labels(metric: names.Metric) -> list[str]:
    return [names.PROMETHEUS_LABELS[key] for key in metric.attributes]


class _Histogram:
    """One labelled histogram: a count per bucket (not cumulative; the last is +Inf) and the sum."""

    __slots__ = ("bounds", "buckets", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.buckets = [0] * (len(bounds) + 1)
        self.sum = 0.0


class _Accumulators:
    """Counters and histograms as plain numbers, turned into metric families at each scrape.

    Updates run on the worker's event loop, once or more per job: a dict lookup and an
    addition under one lock (prometheus_client's own Counter and Histogram take a lock per
    value and a ``labels()`` call per update, several times this cost). The scrape thread
    copies them under the same lock, so a scrape never sees half an observation.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[tuple[str, Labels], float] = {}
        self._histograms: dict[tuple[str, Labels], _Histogram] = {}
        self._bounds = {m.name: names.buckets(m) for m in names.METRICS if m.kind == "histogram"}
        self._error_types = names.ErrorTypeBound()

    def add(self, metric: names.Metric, value: float, labels: Labels) -> None:
        with self._lock:
            key = (metric.name, self._error_types.labels(metric, labels))
            self._counts[key] = self._counts.get(key, 0.0) + value

    def record(self, metric: names.Metric, value: float, labels: Labels) -> None:
        # No histogram has an error_type label today; bounded all the same if one gets it.
        labels = self._error_types.labels(metric, labels)
        histogram = self._histograms.get((metric.name, labels))
        if histogram is None:
            with self._lock:  # a new entry: never while a scrape copies the dict
                histogram = self._histograms[metric.name, labels] = _Histogram(self._bounds[metric.name])
        index = bisect_left(histogram.bounds, value)  # the first bucket whose upper bound holds value
        with self._lock:
            histogram.buckets[index] += 1
            histogram.sum += value

    def families(self) -> Iterator[Metric]:
        with self._lock:
            counts = dict(self._counts)
            histograms = {key: (list(h.buckets), h.sum) for key, h in self._histograms.items()}
        for metric in names.METRICS:
            labelnames = _labels(metric)
            if metric.kind == "counter":
                counter = CounterMetricFamily(metric.prometheus_name, metric.description, labels=labelnames)
                for (name, labels), value in counts.items():
                    if name == metric.name:
                        counter.add_metric(list(labels), value)
                yield counter
            elif metric.kind == "histogram":
                family = HistogramMetricFamily(metric.prometheus_name, metric.description, labels=labelnames)
                les = [*(repr(float(b)) for b in self._bounds[metric.name]), "+Inf"]
                for (name, labels), (buckets, total) in histograms.items():
                    if name == metric.name:
                        cumulative = list(zip(les, accumulate(buckets), strict=True))
                        family.add_metric(list(labels), cumulative, total)
                yield family


class _Collector(Collector):
    """jobchain's metric families: the counters and histograms, the sampled queue gauges and
    the notify-delivery gauge."""

    def __init__(self, observer: MetricsObserver, accumulators: _Accumulators) -> None:
        self._observer = observer
        self._accumulators = accumulators

    def collect(self) -> Iterator[Metric]:
        yield from self._accumulators.families()
        for metric in names.METRICS:
            if metric.kind != "gauge":
                continue
            family = GaugeMetricFamily(metric.prometheus_name, metric.description, labels=_labels(metric))
            for value, labels in self._observer.gauge(metric):
                family.add_metric(list(labels), value)
            yield family


class PrometheusMetrics(MetricsObserver):
    """jobchain's metrics as a prometheus_client collector in ``registry``.

    ``registry`` defaults to a new registry of its own (serve it with
    :func:`serve_prometheus`); pass ``prometheus_client.REGISTRY`` to join your process's
    default one. An observer: pass it to ``jobchain.connect(observers=[...])``, or let
    :meth:`sample_queue` attach it to a worker's client.
    """

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        accumulators = _Accumulators()
        super().__init__(accumulators)
        self.registry.register(_Collector(self, accumulators))


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


DEFAULT_METRICS_HOST = "127.0.0.1"
"""This machine only: the endpoint has no authentication (pass ``0.0.0.0`` to open it)."""


def serve_prometheus(
    port: int = DEFAULT_METRICS_PORT,
    host: str = DEFAULT_METRICS_HOST,
    *,
    registry: CollectorRegistry | None = None,
) -> MetricsServer:
    """Serve ``registry`` (default: prometheus_client's global one) at ``http://host:port/metrics``.

    ``host`` is 127.0.0.1 by default: anyone who can reach the port reads every metric (job
    types, error types, queue depths), since the endpoint has no authentication.

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


__all__ = [
    "DEFAULT_METRICS_HOST",
    "DEFAULT_METRICS_PORT",
    "MetricsServer",
    "PrometheusMetrics",
    "serve_prometheus",
]
