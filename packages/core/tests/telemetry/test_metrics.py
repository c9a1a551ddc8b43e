"""Metrics through the OpenTelemetry API: counters, histograms and the sampled queue gauges."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from jobchain import ChainStart, JobStatus, JobTypes, Schedule
from jobchain.entities import WorkerState
from jobchain.telemetry import OpenTelemetryMetrics, QueueStatsSampler
from jobchain.worker import Attempt, Backoff, Processors, Worker

from .support import memory_client, metric_points, wait_until

ZERO = Backoff(initial=timedelta(0), maximum=timedelta(0))
Reader = tuple[MeterProvider, InMemoryMetricReader]


def _sums(reader: InMemoryMetricReader, name: str, key: str = "jobchain.job.type") -> dict[Any, float]:
    return {attrs.get(key): point.value for attrs, point in metric_points(reader, name)}  # type: ignore[attr-defined]


async def test_counters_and_histograms_follow_what_the_worker_did(metric_reader: Reader) -> None:
    provider, reader = metric_reader
    types = JobTypes()
    good = types.define("good", input=int, output=int, entry=True)
    flaky = types.define("flaky", input=None, output=None, entry=True)
    doomed = types.define("doomed", input=None, output=None, entry=True)
    metrics = OpenTelemetryMetrics(meter_provider=provider)
    client = memory_client(types, metrics)
    async with client.transaction() as tx:
        goods = await client.start_chains(tx, [ChainStart(job_type=good, input=i) for i in range(3)])
        flaky_chain = await client.start_chain(tx, flaky, None)
        doomed_chain = await client.start_chain(tx, doomed, None)
    calls: list[int] = []
    processors = Processors()
    processors.register(good, lambda attempt: attempt.input)

    async def flaky_handler(attempt: Attempt[None, None]) -> Any:
        calls.append(1)
        if len(calls) == 1:
            raise KeyError("first time")
        return await attempt.complete(None)

    async def doomed_handler(attempt: Attempt[None, None]) -> Any:
        raise ValueError("never")

    processors.register(flaky, flaky_handler, retry=ZERO)
    processors.register(doomed, doomed_handler, max_attempts=1)
    async with Worker(client, processors, concurrency=2, poll_interval=0.05):
        for chain_id in [s.id for s in goods] + [flaky_chain.id]:
            await client.await_chain(chain_id, timeout=10, poll_interval=0.05)

        async def doomed_failed() -> bool:
            chain = await client.get_chain(doomed_chain.id)
            return chain is not None and chain.last.status is JobStatus.FAILED

        await wait_until(doomed_failed, "the doomed job to fail")
        await wait_until(lambda: _ready(reader), "the failure to be counted")

    assert _sums(reader, "jobchain.jobs.created") == {"good": 3, "flaky": 1, "doomed": 1}
    assert _sums(reader, "jobchain.jobs.started") == {"good": 3, "flaky": 2, "doomed": 1}
    assert _sums(reader, "jobchain.jobs.completed") == {"good": 3, "flaky": 1}
    retried = metric_points(reader, "jobchain.jobs.retried")
    assert [(a["jobchain.job.type"], a["error.type"], p.value) for a, p in retried] == [  # type: ignore[attr-defined]
        ("flaky", "KeyError", 1)
    ]
    failed = metric_points(reader, "jobchain.jobs.failed")
    assert [(a["jobchain.job.type"], a["error.type"], p.value) for a, p in failed] == [  # type: ignore[attr-defined]
        ("doomed", "ValueError", 1)
    ]
    durations = {
        (a["jobchain.job.type"], a["jobchain.attempt.outcome"]): p.count  # type: ignore[attr-defined]
        for a, p in metric_points(reader, "jobchain.attempt.duration")
    }
    assert durations == {
        ("good", "completed"): 3,
        ("flaky", "retried"): 1,
        ("flaky", "completed"): 1,
        ("doomed", "failed"): 1,
    }
    latency = {a["jobchain.job.type"]: p for a, p in metric_points(reader, "jobchain.job.wakeup_latency")}
    assert latency["good"].count == 3  # type: ignore[attr-defined]
    assert latency["good"].min >= 0  # type: ignore[attr-defined]


async def _ready(reader: InMemoryMetricReader) -> bool:
    return bool(metric_points(reader, "jobchain.jobs.failed"))


async def test_wake_up_latency_is_measured_from_when_the_job_became_due(metric_reader: Reader) -> None:
    provider, reader = metric_reader
    types = JobTypes()
    later = types.define("later", input=None, output=None, entry=True)
    metrics = OpenTelemetryMetrics(meter_provider=provider)
    client = memory_client(types, metrics)
    async with client.transaction() as tx:
        started = await client.start_chain(
            tx, later, None, schedule=Schedule(after=timedelta(milliseconds=300))
        )
    processors = Processors()
    processors.register(later, lambda attempt: None)
    async with Worker(client, processors, poll_interval=0.05):
        await client.await_chain(started.id, timeout=10, poll_interval=0.05)
    [(_attrs, point)] = metric_points(reader, "jobchain.job.wakeup_latency")
    # Measured from scheduled_at, not from creation: the 300 ms it was scheduled ahead do not count.
    assert point.count == 1  # type: ignore[attr-defined]
    assert point.max < 0.3  # type: ignore[attr-defined]


async def test_queue_gauges_report_the_sampled_queue_stats(metric_reader: Reader) -> None:
    provider, reader = metric_reader
    types = JobTypes()
    queued = types.define("queued", input=None, output=None, entry=True)
    metrics = OpenTelemetryMetrics(meter_provider=provider)
    client = memory_client(types, metrics)
    async with client.transaction() as tx:
        await client.start_chains(tx, [ChainStart(job_type=queued, input=None) for _ in range(4)])
        await client.start_chain(tx, queued, None, schedule=Schedule(after=timedelta(hours=1)))
    assert metric_points(reader, "jobchain.queue.depth") == []  # nothing sampled: no series
    sampler = metrics.sample_queue(client)  # a process without a worker always samples
    stats = await sampler.sample_once()
    assert stats is not None
    assert _sums(reader, "jobchain.queue.depth") == {"queued": 4}
    by_status = {a["jobchain.job.status"]: p.value for a, p in metric_points(reader, "jobchain.queue.jobs")}  # type: ignore[attr-defined]
    assert by_status["pending"] == 5
    assert by_status["completed"] == 0
    [(_a, age)] = metric_points(reader, "jobchain.queue.oldest_due_age")
    expected = stats.get("queued").oldest_due_at
    assert expected is not None
    assert age.value == (stats.now - expected).total_seconds()  # type: ignore[attr-defined]
    assert _sums(reader, "jobchain.queue.expired_leases") == {"queued": 0}


async def test_per_name_only_the_oldest_running_worker_of_a_name_samples(metric_reader: Reader) -> None:
    provider, _reader = metric_reader
    types = JobTypes()
    noop = types.define("noop", input=None, output=None, entry=True)
    metrics = OpenTelemetryMetrics(meter_provider=provider)
    client = memory_client(types, metrics)
    processors = Processors()
    processors.register(noop, lambda attempt: None)
    first = Worker(client, processors, name="fleet", poll_interval=60)
    second = Worker(client, processors, name="fleet", poll_interval=60)
    other = Worker(client, processors, name="other", poll_interval=60)

    async def registered(n: int) -> bool:
        return len(await client.list_workers(states=[WorkerState.RUNNING])) == n

    await first.start()
    await wait_until(lambda: registered(1), "the first worker's registration")
    async with second, other:
        await wait_until(lambda: registered(3), "three registrations")
        samplers = [QueueStatsSampler(client, w, reporter="name") for w in (first, second, other)]
        samples = [await s.sample_once() for s in samplers]
        # One per name: the fleet's first worker, and the only "other" worker.
        assert [s is not None for s in samples] == [True, False, True]
        await first.stop()
        # The first one stopped: the next oldest of its name takes over at its next tick.
        assert await samplers[1].sample_once() is not None
        assert await samplers[0].sample_once() is None
