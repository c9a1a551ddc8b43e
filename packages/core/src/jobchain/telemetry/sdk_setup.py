"""``jobchain worker --otel`` (or ``JOBCHAIN_OTEL=1``): the OpenTelemetry SDK for one process.

:func:`configure` returns jobchain's :class:`~jobchain.telemetry.Tracing` and
:class:`~jobchain.telemetry.OpenTelemetryMetrics` observers on the process's providers:

* a global tracer or meter provider the application already set (its module, imported as the
  worker's target, or ``opentelemetry-instrument``) is used as it is;
* otherwise one is built the standard way, from the ``OTEL_*`` environment variables, and set
  as the global one (so the spans a handler opens nest under its attempt's span):
  ``OTEL_TRACES_EXPORTER`` / ``OTEL_METRICS_EXPORTER`` (comma-separated; default ``otlp``;
  ``console``; ``none``; any exporter an installed package registers under the
  ``opentelemetry_*_exporter`` entry points), ``OTEL_EXPORTER_OTLP_*`` (read by the OTLP
  exporters), ``OTEL_SERVICE_NAME`` (default ``jobchain-worker``) and
  ``OTEL_RESOURCE_ATTRIBUTES``, ``OTEL_TRACES_SAMPLER``, ``OTEL_BSP_*``,
  ``OTEL_METRIC_EXPORT_INTERVAL`` (read by the SDK).

Everything missing — the API, the SDK, a named exporter — is found before anything is set
up and raised as one :class:`~jobchain.telemetry.MissingExtraError` naming what to install.
:meth:`OtelProviders.shutdown` flushes and shuts down the providers built here (and only
flushes the application's own).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Any

from jobchain.telemetry._extras import OTEL_EXTRA, MissingExtraError

if TYPE_CHECKING:
    from opentelemetry.sdk.metrics.export import MetricReader
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import SpanProcessor

    from jobchain.telemetry.otel_metrics import OpenTelemetryMetrics
    from jobchain.telemetry.tracing import Tracing

log = logging.getLogger("jobchain.telemetry")

DEFAULT_SERVICE_NAME = "jobchain-worker"
"""``service.name`` unless ``OTEL_SERVICE_NAME`` or ``OTEL_RESOURCE_ATTRIBUTES`` sets one."""
SDK_PACKAGE = "opentelemetry-sdk"
CLONE_EXTRA = '"./packages/core[otel]"'
"""The ``otel`` extra as it is written from a clone of the repository."""

TRACES = ("OTEL_TRACES_EXPORTER", "opentelemetry_traces_exporter", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
METRICS = ("OTEL_METRICS_EXPORTER", "opentelemetry_metrics_exporter", "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL")
OTLP_PROTOCOLS = {"grpc": "otlp_proto_grpc", "http/protobuf": "otlp_proto_http"}
EXPORTER_PACKAGES = {
    "otlp": "opentelemetry-exporter-otlp",
    "otlp_proto_grpc": "opentelemetry-exporter-otlp-proto-grpc",
    "otlp_proto_http": "opentelemetry-exporter-otlp-proto-http",
    "zipkin": "opentelemetry-exporter-zipkin",
    "zipkin_json": "opentelemetry-exporter-zipkin-json",
    "prometheus": "opentelemetry-exporter-prometheus",
}
"""The package that registers each well-known exporter name, for the error's install line."""


@dataclass
class OtelProviders:
    """jobchain's observers on the process's providers, and how to flush them at the end."""

    tracing: Tracing
    metrics: OpenTelemetryMetrics
    description: str
    """One line for the log: where the traces and the metrics go."""
    shutdowns: list[Callable[[], object]] = field(default_factory=list)

    @property
    def observers(self) -> tuple[Tracing, OpenTelemetryMetrics]:
        return self.tracing, self.metrics

    def shutdown(self) -> None:
        """Export what is buffered and shut down the providers built here (flush the others)."""
        for stop in self.shutdowns:
            try:
                stop()
            except Exception:  # an exporter failing at exit must not hide the worker's own result
                log.exception("shutting down the OpenTelemetry providers failed")
        self.shutdowns.clear()


def configure(environ: Mapping[str, str] | None = None) -> OtelProviders:
    """The Tracing and OpenTelemetryMetrics observers on the global providers, or on
    providers built from the ``OTEL_*`` variables (and then set as the global ones).

    Raises MissingExtraError (one line: what to install, or which variable to change) before
    setting anything up when the API, the SDK or a requested exporter is not installed.
    """
    env = os.environ if environ is None else environ
    try:
        from opentelemetry import metrics, trace
    except ImportError:
        raise MissingExtraError(
            f"needs the OpenTelemetry API and SDK: pip install '{OTEL_EXTRA}' {SDK_PACKAGE} "
            f"(from a clone: pip install {CLONE_EXTRA} {SDK_PACKAGE})"
        ) from None
    tracer_set = not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)
    # The API's stand-in before set_meter_provider() is private: recognised by its name.
    meter_set = type(metrics.get_meter_provider()).__name__ != "_ProxyMeterProvider"
    span_exporters: list[tuple[str, Any]] = []
    metric_exporters: list[tuple[str, Any]] = []
    if not (tracer_set and meter_set):
        try:
            import opentelemetry.sdk.metrics
            import opentelemetry.sdk.resources
            import opentelemetry.sdk.trace  # noqa: F401 -- a missing SDK fails here, before anything is set
        except ImportError:
            raise MissingExtraError(
                f"needs the OpenTelemetry SDK ({SDK_PACKAGE}): pip install {SDK_PACKAGE}"
            ) from None
        if not tracer_set:
            span_exporters = load_exporters(TRACES, env)
        if not meter_set:
            metric_exporters = load_exporters(METRICS, env)

    from jobchain.telemetry.otel_metrics import OpenTelemetryMetrics
    from jobchain.telemetry.tracing import Tracing

    shutdowns: list[Callable[[], object]] = []
    if tracer_set:
        tracer_provider = trace.get_tracer_provider()
        traces_to = "the application's tracer provider"
        shutdowns.append(_flusher(tracer_provider))
    else:
        from opentelemetry.sdk.trace import TracerProvider

        built_tracer = TracerProvider(resource=resource(env), shutdown_on_exit=False)
        for _name, exporter in span_exporters:
            built_tracer.add_span_processor(_span_processor(exporter))
        trace.set_tracer_provider(built_tracer)
        tracer_provider = built_tracer
        traces_to = ", ".join(name for name, _ in span_exporters) or "nowhere (none)"
        shutdowns.append(built_tracer.shutdown)
    if meter_set:
        meter_provider = metrics.get_meter_provider()
        metrics_to = "the application's meter provider"
        shutdowns.append(_flusher(meter_provider))
    else:
        from opentelemetry.sdk.metrics import MeterProvider

        built_meter = MeterProvider(
            metric_readers=[_metric_reader(exporter) for _name, exporter in metric_exporters],
            resource=resource(env),
            shutdown_on_exit=False,
        )
        metrics.set_meter_provider(built_meter)
        meter_provider = built_meter
        metrics_to = ", ".join(name for name, _ in metric_exporters) or "nowhere (none)"
        shutdowns.append(built_meter.shutdown)
    return OtelProviders(
        tracing=Tracing(tracer_provider=tracer_provider),
        metrics=OpenTelemetryMetrics(meter_provider=meter_provider),
        description=f"traces to {traces_to}, metrics to {metrics_to}",
        shutdowns=shutdowns,
    )


def exporter_names(variable: str, protocol_variable: str, env: Mapping[str, str]) -> list[str]:
    """The exporter names ``variable`` lists (default ``otlp``; ``none``: no exporter), ``otlp``
    narrowed to ``otlp_proto_grpc`` / ``otlp_proto_http`` when the OTLP protocol is set."""
    raw = env.get(variable, "").strip() or "otlp"
    names = [name.strip().lower() for name in raw.split(",") if name.strip()]
    if "none" in names:
        return []
    protocol = (env.get(protocol_variable) or env.get("OTEL_EXPORTER_OTLP_PROTOCOL") or "").strip()
    return [OTLP_PROTOCOLS.get(protocol, name) if name == "otlp" else name for name in names]


def load_exporters(signal: tuple[str, str, str], env: Mapping[str, str]) -> list[tuple[str, Any]]:
    """(name, exporter instance) for every exporter ``signal``'s variable names.

    The errors read after ``--otel``: "--otel needs the otlp exporter of ...".
    """
    variable, group, protocol_variable = signal
    ways_out = f"or set {variable}=console or none"
    found: list[tuple[str, Any]] = []
    for name in exporter_names(variable, protocol_variable, env):
        points = entry_points(group=group, name=name)
        package = EXPORTER_PACKAGES.get(name)
        shown = f"{variable}={env.get(variable, '').strip() or 'otlp, its default'}"
        if not points:
            if package is not None:
                raise MissingExtraError(
                    f"needs the {name} exporter ({shown}), which is not installed: "
                    f"pip install {package}, {ways_out}"
                )
            known = sorted({point.name for point in entry_points(group=group)} | {"none"})
            raise MissingExtraError(
                f"cannot use {variable}={name!r}: no installed package provides that exporter "
                f"(installed: {', '.join(known)}); install the one that does, {ways_out}"
            )
        try:
            factory = next(iter(points)).load()
        except ImportError as exc:
            install = f"pip install {package}" if package else "reinstall the package that provides it"
            raise MissingExtraError(
                f"cannot import the {name} exporter ({shown}: {exc}): {install}, {ways_out}"
            ) from None
        found.append((name, factory()))
    return found


def resource(env: Mapping[str, str]) -> Resource:
    """The SDK's resource from the environment, ``service.name`` defaulting to jobchain-worker."""
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource

    attributes = env.get("OTEL_RESOURCE_ATTRIBUTES", "")
    named = env.get("OTEL_SERVICE_NAME", "").strip() or any(
        part.partition("=")[0].strip() == SERVICE_NAME for part in attributes.split(",")
    )
    return Resource.create({} if named else {SERVICE_NAME: DEFAULT_SERVICE_NAME})


def _span_processor(exporter: Any) -> SpanProcessor:
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    return BatchSpanProcessor(exporter)


def _metric_reader(exporter: Any) -> MetricReader:
    from opentelemetry.sdk.metrics.export import MetricReader, PeriodicExportingMetricReader

    # A pull exporter (e.g. prometheus) registers a reader itself; a push one is read periodically.
    return exporter if isinstance(exporter, MetricReader) else PeriodicExportingMetricReader(exporter)


def _flusher(provider: object) -> Callable[[], object]:
    """Flush a provider the application owns (it shuts it down itself)."""
    flush = getattr(provider, "force_flush", None)
    return flush if callable(flush) else (lambda: None)


__all__ = ["DEFAULT_SERVICE_NAME", "OtelProviders", "configure"]
