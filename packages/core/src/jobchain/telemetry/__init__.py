"""OpenTelemetry traces and metrics, and Prometheus metrics, for jobchain (optional extras).

Everything is one set of observers on jobchain's observer seam, so it works the same on
every backend:

* :class:`Tracing` (``jobchain[otel]``): a ``publish <type>`` span per job created and a
  ``process <type>`` span per attempt, in one trace per chain (see :mod:`.tracing`).
* :class:`OpenTelemetryMetrics` (``jobchain[otel]``) and
  :class:`jobchain.telemetry.prometheus.PrometheusMetrics` (``jobchain[prometheus]``): the
  metrics of :data:`jobchain.telemetry.names.METRICS`; the queue gauges come from
  ``client.queue_stats()``, sampled by one reporter for the cluster (see :mod:`.sampler`).

Guide: docs/guides/observability.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from jobchain.telemetry._extras import OTEL_EXTRA, PROMETHEUS_EXTRA, MissingExtraError, has_module

if not (has_module("opentelemetry") or has_module("prometheus_client")):
    raise MissingExtraError(
        f"jobchain.telemetry needs OpenTelemetry or prometheus_client: pip install '{OTEL_EXTRA}' "
        f"(or '{PROMETHEUS_EXTRA}')"
    )

from jobchain.telemetry.recorder import MetricsObserver
from jobchain.telemetry.sampler import DEFAULT_SAMPLE_INTERVAL, QueueStatsSampler, Reporter

if TYPE_CHECKING:
    from jobchain.telemetry.otel_metrics import OpenTelemetryMetrics
    from jobchain.telemetry.tracing import Tracing

_LAZY = {
    "Tracing": "jobchain.telemetry.tracing",
    "OpenTelemetryMetrics": "jobchain.telemetry.otel_metrics",
}


def __getattr__(name: str) -> Any:
    # The OpenTelemetry parts load on first use, so a Prometheus-only install imports this
    # package; without opentelemetry-api they raise MissingExtraError naming jobchain[otel].
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'jobchain.telemetry' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)


__all__ = [
    "DEFAULT_SAMPLE_INTERVAL",
    "MetricsObserver",
    "MissingExtraError",
    "OpenTelemetryMetrics",
    "QueueStatsSampler",
    "Reporter",
    "Tracing",
]
