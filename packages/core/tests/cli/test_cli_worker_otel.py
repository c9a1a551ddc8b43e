"""`jobchain worker --otel` (or ``JOBCHAIN_OTEL=1``): a worker process traced and metered
through the OpenTelemetry SDK, configured from the standard ``OTEL_*`` variables or from the
global providers the application set; without the SDK (or a requested exporter) a usage error
naming what to install.

The workers run as real processes against a SQLite file; the tests wait on the job's
completion in the database (bounded generously for a loaded machine), never a fixed sleep.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import textwrap
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import pytest

import jobchain

WORKER = (sys.executable, "-m", "jobchain.cli", "worker")
BOUND = 120.0
"""Seconds any one wait may take: a passing run needs a small fraction of it."""

APP = textwrap.dedent(
    """
    from opentelemetry import trace

    from jobchain import JobTypes
    from jobchain.worker import Processors

    types = JobTypes()
    greet = types.define("otel.greet", input=str, output=str, entry=True)
    processors = Processors()

    @processors.handler(greet)
    async def handle(attempt):
        # The global tracer: under --otel, this span nests under the attempt's span.
        with trace.get_tracer("app").start_as_current_span("app work"):
            return await attempt.complete(f"hello {attempt.input}")
    """
)

APP_WITH_ITS_OWN_PROVIDER = (
    textwrap.dedent(
        """
        from opentelemetry import trace
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor

        provider = TracerProvider()
        provider.add_span_processor(
            SimpleSpanProcessor(ConsoleSpanExporter(formatter=lambda span: f"app provider: {span.name}\\n"))
        )
        trace.set_tracer_provider(provider)
        """
    )
    + APP
)


def documents(text: str) -> list[Any]:
    """The JSON documents the console exporters wrote one after the other."""
    decoder = json.JSONDecoder()
    found: list[Any] = []
    index = 0
    while True:
        while index < len(text) and text[index].isspace():
            index += 1
        if index >= len(text):
            return found
        if text[index] not in "{[":  # not an exporter's document (e.g. the app provider's line)
            index = text.find("\n", index)
            if index < 0:
                return found
            continue
        value, index = decoder.raw_decode(text, index)
        found.append(value)


def metric_points(docs: list[Any], name: str) -> list[dict[str, Any]]:
    """Every data point of the metric ``name`` in the console metric exports."""
    points: list[dict[str, Any]] = []
    for doc in docs:
        for resource in doc.get("resource_metrics", []) if isinstance(doc, dict) else []:
            for scope in resource["scope_metrics"]:
                for metric in scope["metrics"]:
                    if metric["name"] == name:
                        points += metric["data"]["data_points"]
    return points


def spans(docs: list[Any]) -> list[dict[str, Any]]:
    return [doc for doc in docs if isinstance(doc, dict) and "context" in doc and "name" in doc]


def run_one_job(tmp_path: Path, app: str, *options: str, env: dict[str, str]) -> tuple[str, str, str]:
    """Start one ``otel.greet`` chain in a SQLite file, run a worker process on it until the
    chain completed, stop it with SIGTERM; return (chain id, its stdout, its stderr)."""
    (tmp_path / "otel_app.py").write_text(app)
    state = f"sqlite:///{tmp_path / 'jobs.db'}"
    sys.path.insert(0, str(tmp_path))
    try:
        import otel_app  # type: ignore[import-not-found]
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("otel_app", None)
    types = otel_app.types

    async def start() -> str:
        async with await jobchain.connect(state, notify="none", job_types=types, migrate=True) as client:
            async with client.transaction() as tx:
                started = await client.start_chain(tx, otel_app.greet, "otel")
        return started.chain.id

    async def completed(chain_id: str, process: subprocess.Popen[bytes]) -> object:
        """The chain's output once completed; fails at once if the worker exited first."""
        async with await jobchain.connect(state, notify="none", job_types=types) as client:
            async with asyncio.timeout(BOUND):
                while (chain := await client.get_chain(chain_id)) is None or chain.status != "completed":
                    assert process.poll() is None, f"the worker exited {process.returncode}"
                    await asyncio.sleep(0.1)
        return chain.last.output

    chain_id = asyncio.run(start())
    out, err = tmp_path / "stdout.txt", tmp_path / "stderr.txt"
    with out.open("w") as stdout, err.open("w") as stderr:
        process = subprocess.Popen(
            [*WORKER, "otel_app:processors", "--state", state, "--poll-interval", "0.1", *options],
            cwd=tmp_path,
            env=env | {"PYTHONPATH": str(tmp_path)},
            stdout=stdout,
            stderr=stderr,
        )
        try:
            assert asyncio.run(completed(chain_id, process)) == "hello otel", err.read_text()
            process.send_signal(signal.SIGTERM)
            assert process.wait(timeout=BOUND) == 0, err.read_text()
        finally:
            if process.poll() is None:
                process.kill()
                process.wait(timeout=BOUND)
    return chain_id, out.read_text(), err.read_text()


def otel_env(**values: str) -> dict[str, str]:
    """This process's environment without its OTEL_* variables and JOBCHAIN_OTEL, plus ``values``."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_") and k != "JOBCHAIN_OTEL"}
    return clean | values


def test_otel_exports_the_attempts_span_and_the_completion_metric(tmp_path: Path) -> None:
    chain_id, stdout, stderr = run_one_job(
        tmp_path,
        APP,
        "--otel",
        env=otel_env(OTEL_TRACES_EXPORTER="console", OTEL_METRICS_EXPORTER="console"),
    )
    docs = documents(stdout)
    found = spans(docs)
    [process] = [s for s in found if s["name"] == "process otel.greet"]
    assert process["kind"] == "SpanKind.CONSUMER"
    assert process["attributes"]["jobchain.chain.id"] == chain_id
    assert process["attributes"]["jobchain.attempt.result"] == "completed"
    assert process["resource"]["attributes"]["service.name"] == "jobchain-worker"
    # --otel set the global tracer provider: the handler's own span nests under the attempt's.
    [work] = [s for s in found if s["name"] == "app work"]
    assert work["parent_id"] == process["context"]["span_id"]
    [point] = metric_points(docs, "jobchain.jobs.completed")
    assert point["attributes"] == {"jobchain.job.type": "otel.greet"}
    assert point["value"] == 1
    assert "OpenTelemetry" in stderr  # the log line saying where traces and metrics go


def test_jobchain_otel_1_uses_the_providers_the_application_set(tmp_path: Path) -> None:
    # The app sets its own global tracer provider: the worker uses it, so the OTLP trace
    # exporter named here (not installed) is not needed; the meter provider is built from
    # the environment, with its service name.
    _chain_id, stdout, stderr = run_one_job(
        tmp_path,
        APP_WITH_ITS_OWN_PROVIDER,
        env=otel_env(
            JOBCHAIN_OTEL="1",
            OTEL_TRACES_EXPORTER="otlp",
            OTEL_METRICS_EXPORTER="console",
            OTEL_SERVICE_NAME="shop-worker",
        ),
    )
    assert "app provider: process otel.greet" in stdout.splitlines(), stderr
    docs = documents(stdout)
    [point] = metric_points(docs, "jobchain.jobs.completed")
    assert point["value"] == 1
    [resource] = {
        json.dumps(r["resource"]["attributes"], sort_keys=True)
        for doc in docs
        for r in doc["resource_metrics"]
    }
    assert json.loads(resource)["service.name"] == "shop-worker"


def _worker_exit(blocked: str | None, env: dict[str, str], *options: str) -> subprocess.CompletedProcess[str]:
    """``jobchain worker jobchain.demo:processors --state memory:// OPTIONS`` in a fresh
    interpreter in which importing the module ``blocked`` fails, with the environment ``env``."""
    block = f"import sys; sys.modules[{blocked!r}] = None; " if blocked else ""
    code = block + "from jobchain.cli import main; main()"
    return subprocess.run(
        [sys.executable, "-c", code, "worker", "jobchain.demo:processors", "--state", "memory://", *options],
        env=env,
        capture_output=True,
        text=True,
        timeout=BOUND,
    )


@pytest.mark.parametrize(
    ("blocked", "install"),
    [
        ("opentelemetry.sdk", "pip install opentelemetry-sdk"),
        ("opentelemetry", "pip install 'jobchain[otel]' opentelemetry-sdk"),
    ],
)
def test_without_the_sdk_otel_is_a_usage_error_naming_the_package(blocked: str, install: str) -> None:
    done = _worker_exit(
        blocked, otel_env(OTEL_TRACES_EXPORTER="console", OTEL_METRICS_EXPORTER="console"), "--otel"
    )
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert "--otel" in done.stderr
    assert install in done.stderr


@pytest.mark.skipif(
    bool(entry_points(group="opentelemetry_traces_exporter", name="otlp")),
    reason="the OTLP exporter is installed here",
)
def test_the_default_otlp_exporter_not_installed_is_a_usage_error_naming_it() -> None:
    # OTEL_TRACES_EXPORTER unset means otlp (the OpenTelemetry default).
    done = _worker_exit(None, otel_env(JOBCHAIN_OTEL="true"))
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert "pip install opentelemetry-exporter-otlp" in done.stderr
    assert "or set OTEL_TRACES_EXPORTER=console" in done.stderr  # the other way out


def test_an_unknown_exporter_name_is_a_usage_error() -> None:
    done = _worker_exit(
        None, otel_env(OTEL_TRACES_EXPORTER="console", OTEL_METRICS_EXPORTER="carrier-pigeon"), "--otel"
    )
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert "OTEL_METRICS_EXPORTER" in done.stderr
    assert "'carrier-pigeon'" in done.stderr


def test_the_worker_attaches_every_metrics_observer_and_samples_the_queue_once() -> None:
    from opentelemetry.sdk.metrics import MeterProvider

    from jobchain.cli.worker import attach_observers
    from jobchain.memory.notify import MemoryNotifyAdapter
    from jobchain.memory.state import MemoryStateAdapter
    from jobchain.telemetry import OpenTelemetryMetrics
    from jobchain.telemetry.prometheus import PrometheusMetrics

    class FakeWorker:  # what attach_observers reads of a worker: its client
        def __init__(self) -> None:
            self.client = jobchain.Client(MemoryStateAdapter(), MemoryNotifyAdapter(), jobchain.JobTypes())

    provider = MeterProvider()
    try:
        otel = OpenTelemetryMetrics(meter_provider=provider)
        prometheus = PrometheusMetrics()
        worker: Any = FakeWorker()
        # --queue-gauges off: the counters and histograms still count (no sampler).
        assert attach_observers(worker, prometheus, [otel], "off") is None
        assert [o for o in worker.client.observers if o in (prometheus, otel)] == [prometheus, otel]
        worker = FakeWorker()
        sampler = attach_observers(worker, prometheus, [otel], "cluster")
        assert sampler is not None
        assert prometheus.samplers[-1] is sampler
        assert otel.samplers[-1] is sampler  # one queue_stats() query feeds both exports
    finally:
        provider.shutdown()
