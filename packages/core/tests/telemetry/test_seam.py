"""The observer seam's optional abilities: found once per observer set, free when unused."""

from __future__ import annotations

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from jobchain import Deduplication, JobTypes
from jobchain.contracts import Event
from jobchain.telemetry import OpenTelemetryMetrics, Tracing

from .support import Traces, memory_client, metric_points


class Plain:
    def __init__(self) -> None:
        self.events: list[str] = []

    def on_event(self, event: Event) -> None:
        self.events.append(event.name)


async def test_a_client_without_abilities_has_none_to_call() -> None:
    client = memory_client(JobTypes(), Plain())
    assert client.attempt_observers == ()
    assert client.creation_observers == ()
    assert client.records_transaction_events


async def test_transactions_build_no_events_when_no_observer_reads_them(traces: Traces) -> None:
    types = JobTypes()
    thing = types.define("thing", input=None, output=None, entry=True)
    tracing = Tracing(tracer_provider=traces.provider)
    client = memory_client(types, tracing)
    assert client.attempt_observers == (tracing,)
    assert client.creation_observers == (tracing,)
    assert not client.records_transaction_events
    async with client.transaction() as tx:
        await client.start_chain(tx, thing, None)
        assert tx.hooks.events == []
    # Replacing the observers is seen at once: a plain observer reads transaction events.
    plain = Plain()
    client.observers = (*client.observers, plain)
    assert client.records_transaction_events
    async with client.transaction() as tx:
        await client.start_chain(tx, thing, None)
    assert plain.events == ["chain_created", "job_created"]
    assert len(traces.named("publish thing")) == 2


async def test_jobs_created_counts_new_jobs_only() -> None:
    reader = InMemoryMetricReader()
    types = JobTypes()
    once = types.define("once", input=None, output=None, entry=True)
    client = memory_client(types, OpenTelemetryMetrics(meter_provider=MeterProvider(metric_readers=[reader])))
    for _ in range(3):
        async with client.transaction() as tx:
            await client.start_chain(tx, once, None, deduplication=Deduplication(key="k"))
    [(attrs, point)] = metric_points(reader, "jobchain.jobs.created")
    assert attrs == {"jobchain.job.type": "once"}
    assert point.value == 1  # type: ignore[attr-defined]
