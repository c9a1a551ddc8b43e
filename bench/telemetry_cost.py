"""What jobchain.telemetry costs the worker: the same PostgreSQL row with and without it, interleaved.

    python bench/telemetry_cost.py [--rounds 5] [--jobs 20000] [--variants plain,prometheus,otel]

Row: atomic mode, concurrency 10, prefetch 10, no notify (issue 18's speed bar). Variants:
``plain`` (no observer), ``prometheus`` (what ``jobchain worker --metrics-port`` adds:
PrometheusMetrics on the client and its queue-stats sampler) and ``otel`` (Tracing and
OpenTelemetryMetrics with the SDK, spans to a no-op exporter through a BatchSpanProcessor);
for diagnosis also ``noop`` (an observer that ignores every event: the seam's own cost) and
``prometheus-unsampled`` (the metrics without the queue-stats sampler).
Each round runs every variant once, rotating the order, each in its own process on a freshly
filled schema (``bench_telemetry`` in database ``BENCH_TELEMETRY_DB``, default ``test``).
Prints per variant the median jobs/s and CPU per 1,000 jobs, and the ratio to ``plain``.
Runs in bench/.venv, which needs ``prometheus_client`` and ``opentelemetry-sdk`` besides
bench/requirements.txt (``bench/.venv/bin/pip install prometheus_client opentelemetry-sdk``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

from benchenv import ensure_venv  # noqa: E402

if __name__ == "__main__":
    ensure_venv(__file__)

from common import PG_BASE  # noqa: E402

DB = os.environ.get("BENCH_TELEMETRY_DB", "test")
STATE = f"{PG_BASE}/{DB}?schema=bench_telemetry"


def psql(sql: str) -> None:
    subprocess.run(["psql", f"{PG_BASE}/{DB}", "-qAtX", "-c", sql], check=True, capture_output=True)


def child(variant: str, jobs: int) -> dict[str, Any]:
    """Run in a fresh process: process ``jobs`` filled jobs with the ``variant``'s observers."""
    import jc
    from common import run_loop

    from jobchain.worker import Worker

    observers: list[Any] = []
    metrics: Any = None
    if variant in ("prometheus", "prometheus-unsampled"):
        from jobchain.telemetry.prometheus import PrometheusMetrics

        metrics = PrometheusMetrics()
        observers = [metrics]
    elif variant == "noop":  # the seam alone: an observer that reads every event and does nothing

        class Noop:
            def on_event(self, event: Any) -> None:
                return None

        observers = [Noop()]
    elif variant == "otel":
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import InMemoryMetricReader
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

        from jobchain.telemetry import OpenTelemetryMetrics, Tracing

        class Discard(SpanExporter):
            def export(self, spans: Any) -> SpanExportResult:
                return SpanExportResult.SUCCESS

        tracer_provider = TracerProvider()
        tracer_provider.add_span_processor(BatchSpanProcessor(Discard()))
        metrics = OpenTelemetryMetrics(meter_provider=MeterProvider(metric_readers=[InMemoryMetricReader()]))
        observers = [Tracing(tracer_provider=tracer_provider), metrics]

    import jobchain

    async def connect(state: str, notify: str) -> jobchain.Client:
        client = await jobchain.connect(state, notify=notify, job_types=jc.types, observers=observers)
        await client.state.migrate()
        return client

    class Sampled(Worker):
        async def start(self) -> None:
            await super().start()
            sampled = metrics is not None and variant != "prometheus-unsampled"
            self.sampler = metrics.sample_queue(self) if sampled else None
            if self.sampler is not None:
                self.sampler.start()

        async def stop(self) -> None:
            if getattr(self, "sampler", None) is not None:
                await self.sampler.stop()
            await super().stop()

    jc.connect = connect  # type: ignore[assignment]  # the workload, with this variant's observers
    jc.Worker = Sampled  # type: ignore[misc]
    cfg = {"state": STATE, "notify": "none", "mode": "atomic", "concurrency": 10, "prefetch": 10, "n": jobs}
    return run_loop(jc.work(cfg))


def measure(variant: str, jobs: int) -> tuple[float, float]:
    psql("DROP SCHEMA IF EXISTS bench_telemetry CASCADE")
    subprocess.run(
        [sys.executable, str(BENCH / "jc.py"), "fill", STATE, str(jobs)], check=True, capture_output=True
    )
    psql("ANALYZE bench_telemetry.jobchain_job")
    out = subprocess.run(
        [sys.executable, __file__, "--child", variant, "--jobs", str(jobs)],
        check=True,
        capture_output=True,
        text=True,
    )
    result = json.loads(out.stdout.strip().splitlines()[-1])
    return float(result["rate"]), float(result["cpu_per_1000"]) * 1000  # ms per 1,000 jobs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--variants", default="plain,prometheus,otel")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.jobs)))
        return
    variants = args.variants.split(",")
    rates: dict[str, list[float]] = {v: [] for v in variants}
    cpus: dict[str, list[float]] = {v: [] for v in variants}
    for round_ in range(args.rounds):
        order = variants[round_ % len(variants) :] + variants[: round_ % len(variants)]
        for variant in order:
            rate, cpu = measure(variant, args.jobs)
            rates[variant].append(rate)
            cpus[variant].append(cpu)
            print(
                f"round {round_ + 1} {variant}: {rate:,.0f} jobs/s, {cpu:.1f} ms CPU per 1,000 jobs",
                flush=True,
            )
    base_rate = statistics.median(rates[variants[0]])
    base_cpu = statistics.median(cpus[variants[0]])
    summary = {}
    for variant in variants:
        rate, cpu = statistics.median(rates[variant]), statistics.median(cpus[variant])
        summary[variant] = {
            "rate": rate,
            "cpu_per_1000": cpu,
            "rate_ratio": rate / base_rate,
            "cpu_ratio": cpu / base_cpu,
        }
        print(
            f"{variant}: median {rate:,.0f} jobs/s ({rate / base_rate:.3f} of {variants[0]}), "
            f"{cpu:.1f} ms CPU per 1,000 jobs ({cpu / base_cpu:.3f})"
        )
    if args.out:
        Path(args.out).write_text(
            json.dumps({"rounds": args.rounds, "jobs": args.jobs, "summary": summary}, indent=2)
        )


if __name__ == "__main__":
    main()
