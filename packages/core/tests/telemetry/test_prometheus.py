"""Prometheus: the same metrics scraped over real HTTP from a real worker's process."""

from __future__ import annotations

import socket
from typing import Any

import httpx
import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

import jobchain
from jobchain import ChainStart, JobTypes
from jobchain.errors import MetricsPortInUseError
from jobchain.telemetry.prometheus import PrometheusMetrics, serve_prometheus
from jobchain.worker import Attempt, Processors, Worker

from .support import wait_until


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


async def test_a_scrape_shows_what_a_real_worker_did() -> None:
    types = JobTypes()
    resize = types.define("images.resize", input=int, output=int, entry=True)
    metrics = PrometheusMetrics()
    # The memory backend: the queue stats of every backend share one contract.
    client = await jobchain.connect("memory://", notify="memory://", job_types=types, observers=[])
    try:
        async with client.transaction() as tx:
            started = await client.start_chains(tx, [ChainStart(job_type=resize, input=i) for i in range(3)])
        processors = Processors()

        async def handle(attempt: Attempt[int, int]) -> Any:
            return await attempt.complete(attempt.input * 10)

        processors.register(resize, handle)
        with serve_prometheus(0, "127.0.0.1", registry=metrics.registry) as server:
            worker = Worker(client, processors, poll_interval=0.05, heartbeat_interval=0.2)
            async with worker, metrics.sample_queue(worker, interval=0.05):
                for s in started:
                    await client.await_chain(s.id, timeout=10, poll_interval=0.05)

                async def scraped() -> dict[Any, float] | None:
                    async with httpx.AsyncClient() as http:
                        response = await http.get(server.url)
                    assert response.status_code == 200
                    assert response.headers["content-type"].startswith("text/plain")
                    samples = _samples(response.text)
                    depth = samples.get(
                        ("jobchain_queue_jobs", (("job_type", "images.resize"), ("status", "completed")))
                    )
                    return samples if depth == 3 else None

                samples = await wait_until(scraped, "a scrape with the sampled queue stats")
    finally:
        await client.close()
    label = (("job_type", "images.resize"),)
    assert samples[("jobchain_jobs_started_total", label)] == 3
    assert samples[("jobchain_jobs_completed_total", label)] == 3
    assert samples[("jobchain_attempt_duration_seconds_count", (*label, ("outcome", "completed")))] == 3
    assert samples[("jobchain_job_wakeup_latency_seconds_count", label)] == 3
    assert samples[("jobchain_queue_depth", label)] == 0
    assert samples[("jobchain_queue_oldest_due_age_seconds", label)] == 0
    assert samples[("jobchain_queue_expired_leases", label)] == 0
    # The observer was attached to the worker's client by sample_queue: no connect(observers=) needed.
    assert metrics in client.observers


def test_a_port_in_use_is_a_typed_error_naming_the_port() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(MetricsPortInUseError, match=f"metrics port {port} is already in use") as caught:
            serve_prometheus(port, "127.0.0.1", registry=CollectorRegistry())
    assert caught.value.port == port


def test_a_closed_server_releases_its_port() -> None:
    server = serve_prometheus(0, "127.0.0.1", registry=CollectorRegistry())
    port = server.port
    server.close()
    with serve_prometheus(port, "127.0.0.1", registry=CollectorRegistry()) as again:
        assert again.port == port


def test_histograms_and_counters_scrape_as_prometheus_client_writes_them() -> None:
    from prometheus_client import generate_latest

    from jobchain.telemetry import names

    metrics = PrometheusMetrics()
    for seconds in (0.003, 0.02, 0.02, 400.0):
        metrics.sink.record(names.ATTEMPT_DURATION, seconds, ("t", "completed"))
    metrics.sink.add(names.JOBS_RETRIED, 2, ("t", "KeyError"))
    samples = _samples(generate_latest(metrics.registry).decode())
    labels = (("job_type", "t"), ("outcome", "completed"))

    def bucket(le: str) -> float:
        return samples[("jobchain_attempt_duration_seconds_bucket", tuple(sorted((*labels, ("le", le)))))]

    assert (bucket("0.005"), bucket("0.025"), bucket("300.0"), bucket("+Inf")) == (1, 3, 3, 4)
    assert samples[("jobchain_attempt_duration_seconds_count", labels)] == 4
    assert samples[("jobchain_attempt_duration_seconds_sum", labels)] == 400.043
    retried = (("error_type", "KeyError"), ("job_type", "t"))
    assert samples[("jobchain_jobs_retried_total", retried)] == 2


async def test_an_attempt_ended_by_wait_for_is_timed_as_waiting_not_failed() -> None:
    from prometheus_client import generate_latest

    types = JobTypes()
    child = types.define("child", input=int, output=int, entry=True)
    parent = types.define("parent", input=int, output=int, entry=True)
    metrics = PrometheusMetrics()
    client = await jobchain.connect("memory://", notify="memory://", job_types=types, observers=[metrics])
    processors = Processors()

    async def on_child(attempt: Attempt[int, int]) -> Any:
        return await attempt.complete(attempt.input + 1)

    async def on_parent(attempt: Attempt[int, int]) -> Any:
        blockers = await attempt.blockers()
        if not blockers:
            return await attempt.wait_for(await attempt.start_chain(child, attempt.input))
        return await attempt.complete(blockers[0].output)

    processors.register(child, on_child)
    processors.register(parent, on_parent)
    try:
        async with client.transaction() as tx:
            started = await client.start_chain(tx, parent, 41)
        async with Worker(client, processors, poll_interval=0.05):
            chain = await client.await_chain(started.id, timeout=10, poll_interval=0.05)
    finally:
        await client.close()
    assert chain.output == 42
    samples = _samples(generate_latest(metrics.registry).decode())
    label = (("job_type", "parent"),)
    assert samples[("jobchain_attempt_duration_seconds_count", (*label, ("outcome", "waiting")))] == 1
    assert samples[("jobchain_attempt_duration_seconds_count", (*label, ("outcome", "completed")))] == 1
    assert ("jobchain_jobs_retried_total", (*label, ("error_type", ""))) not in samples
