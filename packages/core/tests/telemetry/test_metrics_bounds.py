"""Issue 34, finding 11: the Prometheus endpoint listens on loopback unless told otherwise
(it has no authentication), and the ``error_type`` label has a bounded number of values:
the first :data:`~jobchain.telemetry.names.MAX_ERROR_TYPES` distinct exception classes keep
their name, every later one is counted under ``other`` (Prometheus and OpenTelemetry)."""

from __future__ import annotations

import inspect
import socket
from collections import Counter

from click.testing import CliRunner
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from jobchain.cli.worker import run_worker, worker_command
from jobchain.contracts.observe import Event
from jobchain.telemetry import OpenTelemetryMetrics, names
from jobchain.telemetry.prometheus import PrometheusMetrics, serve_prometheus
from jobchain.telemetry.recorder import MetricsObserver

from .support import metric_points

N = names.MAX_ERROR_TYPES
EXTRA = 7


def _fail(observer: MetricsObserver, index: int, error_type: str, *, final: bool) -> None:
    attributes = {"job.type": "t", "job.id": f"job-{index}", "error.type": error_type, "final": final}
    observer.on_event(Event("job_attempt_failed", attributes))


def _feed(observer: MetricsObserver, *, final: bool) -> None:
    """N + EXTRA distinct classes once each, then the first class once more (after the cap)."""
    for i in range(N + EXTRA):
        _fail(observer, i, f"Error{i}", final=final)
    _fail(observer, N + EXTRA, "Error0", final=final)


def _scraped(metrics: PrometheusMetrics, family: str) -> dict[str, float]:
    """error_type -> value of the counter ``family`` in a scrape."""
    found: dict[str, float] = {}
    for parsed in text_string_to_metric_families(generate_latest(metrics.registry).decode()):
        for sample in parsed.samples:
            if sample.name == family:
                found[sample.labels["error_type"]] = sample.value
    return found


def _expected() -> dict[str, float]:
    expected = {f"Error{i}": 1.0 for i in range(N)}
    expected["Error0"] = 2.0  # a class kept before the cap keeps its own series after it
    expected[names.OTHER_ERROR_TYPE] = float(EXTRA)
    return expected


def test_the_cap_is_a_named_constant_of_a_sensible_size() -> None:
    assert 10 <= names.MAX_ERROR_TYPES <= 1000
    assert names.OTHER_ERROR_TYPE == "other"


def test_prometheus_keeps_n_error_types_and_counts_the_rest_as_other() -> None:
    metrics = PrometheusMetrics()
    _feed(metrics, final=True)
    _feed(metrics, final=False)
    for family in ("jobchain_jobs_failed_total", "jobchain_jobs_retried_total"):
        series = _scraped(metrics, family)
        assert len(series) == N + 1, family
        assert series == _expected(), family


def test_opentelemetry_keeps_n_error_types_and_counts_the_rest_as_other() -> None:
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    try:
        metrics = OpenTelemetryMetrics(meter_provider=provider)
        _feed(metrics, final=True)
        _feed(metrics, final=False)
        for name in ("jobchain.jobs.failed", "jobchain.jobs.retried"):
            points = metric_points(reader, name)
            series = Counter[str]()
            for attributes, point in points:
                series[str(attributes[names.ERROR_TYPE])] += point.value  # type: ignore[attr-defined]
            assert len(series) == N + 1, name
            assert dict(series) == _expected(), name
    finally:
        provider.shutdown()


def test_each_observer_has_its_own_bound() -> None:
    first, second = PrometheusMetrics(), PrometheusMetrics()
    _feed(first, final=True)
    _fail(second, 0, f"Error{N + 1}", final=True)  # "other" for the first, not for the second
    assert _scraped(second, "jobchain_jobs_failed_total") == {f"Error{N + 1}": 1.0}


# ---------------------------------------------------------------- where the endpoint listens


def test_serve_prometheus_listens_on_loopback_by_default() -> None:
    assert inspect.signature(serve_prometheus).parameters["host"].default == "127.0.0.1"
    with serve_prometheus(0, registry=CollectorRegistry()) as server:
        assert server.host == "127.0.0.1"
        assert server.url == f"http://127.0.0.1:{server.port}/metrics"
        with socket.create_connection(("127.0.0.1", server.port), timeout=10):
            pass


def test_the_worker_command_listens_on_loopback_by_default() -> None:
    assert inspect.signature(run_worker).parameters["metrics_host"].default == "127.0.0.1"
    with socket.socket() as taken:
        # Taken on 127.0.0.1 only: a bind to 0.0.0.0 would fail as well, so the message's
        # address is the one the command tried.
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = CliRunner().invoke(
            worker_command,
            ["jobchain.demo:processors", "--state", "memory://", "--metrics-port", str(port)],
            catch_exceptions=False,
        )
    assert result.exit_code == 1
    assert f"already in use (127.0.0.1:{port})" in result.output


def test_the_worker_command_says_the_endpoint_has_no_authentication() -> None:
    result = CliRunner().invoke(worker_command, ["--help"])
    assert result.exit_code == 0
    text = " ".join(result.output.split())
    assert "--metrics-host" in text
    assert "no authentication" in text
    assert "[default: 127.0.0.1]" in text
