"""The queue gauges are exported once per cluster: one reporter, elected in the worker registry.

Two workers with different names, each with its own Prometheus registry (two processes'
endpoints), on one state backend: summed over both scrapes, every queue gauge equals the
database's counts, and each series comes from one of them. Samples are driven explicitly
(``sample_once``), so the handovers need no wall-clock window.

PostgreSQL is ``JOBCHAIN_TEST_POSTGRES_URL`` (default ``postgresql://postgres@127.0.0.1:5432/test``),
in a fresh schema dropped afterwards; unreachable, the test skips, except under ``CI=true``.
"""

from __future__ import annotations

import asyncio
import signal
import socket
import sys
import uuid
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

import jobchain
from jobchain import ChainStart, Client, JobTypes, Schedule
from jobchain.contracts.workers import WorkerHeartbeat
from jobchain.entities import JobStatus, WorkerState
from jobchain.errors import InvalidArgumentError
from jobchain.memory.notify import MemoryNotifyAdapter
from jobchain.memory.state import MemoryStateAdapter
from jobchain.stats import QueueStats
from jobchain.telemetry import QueueStatsSampler
from jobchain.telemetry.prometheus import PrometheusMetrics
from jobchain.worker import Processors, Worker

from .support import wait_until

Series = tuple[str, tuple[tuple[str, str], ...]]
GAUGES = (
    "jobchain_queue_depth",
    "jobchain_queue_jobs",
    "jobchain_queue_expired_leases",
    "jobchain_queue_oldest_due_age_seconds",
)


def _types() -> tuple[JobTypes, Processors, Processors]:
    """``charge`` served by both workers, ``email`` by ``batch`` only, ``audit`` by none."""
    types = JobTypes()
    charge = types.define("shop.charge", input=int, output=None, entry=True)
    email = types.define("shop.email", input=int, output=None, entry=True)
    types.define("shop.audit", input=int, output=None, entry=True)
    web = Processors()
    web.register(charge, lambda attempt: None)
    batch = Processors()
    batch.register(charge, lambda attempt: None)
    batch.register(email, lambda attempt: None)
    return types, web, batch


def _gauges(metrics: PrometheusMetrics) -> dict[Series, float]:
    """The queue-gauge series of one scrape of ``metrics``'s registry."""
    found: dict[Series, float] = {}
    for family in text_string_to_metric_families(generate_latest(metrics.registry).decode()):
        for sample in family.samples:
            if sample.name in GAUGES:
                found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


def _counted(stats: QueueStats) -> dict[Series, float]:
    """What the database counted, as the series the gauges should sum to (ages left out)."""
    found: dict[Series, float] = {}
    for t in stats.types:
        label = (("job_type", t.type_name),)
        found[("jobchain_queue_depth", label)] = t.due
        found[("jobchain_queue_expired_leases", label)] = t.expired_leases
        for status in JobStatus:
            key = ("jobchain_queue_jobs", (*label, ("status", status.value)))
            found[key] = t.count(status)
    return found


async def _running(client: Client, n: int) -> bool:
    return len(await client.list_workers(states=[WorkerState.RUNNING])) == n


@pytest.fixture(params=["memory", "sqlite", "postgresql"])
async def two_clients(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[tuple[Client, Client, JobTypes, Processors, Processors]]:
    """Two clients (two processes' worth) on one state backend, and the types and processors."""
    types, web, batch = _types()
    if request.param == "memory":
        state = MemoryStateAdapter()  # one store: what two processes share through a database
        first = Client(state, MemoryNotifyAdapter(), types)
        second = Client(state, MemoryNotifyAdapter(), types)
        yield first, second, types, web, batch
        return
    drop: Callable[[str], None] | None = None
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'jobs.db'}"
    else:
        server = request.getfixturevalue("postgres_server")
        drop = request.getfixturevalue("drop_postgres_schema")  # not during teardown: deprecated
        schema = f"jc_rep_{uuid.uuid4().hex[:12]}"
        url = f"{server}{'&' if '?' in server else '?'}schema={schema}"
    first = await jobchain.connect(url, notify="none", job_types=types, migrate=True)
    second = await jobchain.connect(url, notify="none", job_types=types)
    try:
        yield first, second, types, web, batch
    finally:
        await first.close()
        await second.close()
        if drop is not None:
            drop(schema)


@pytest.mark.pg_connections(8)
async def test_two_differently_named_workers_sum_to_the_database_counts(
    two_clients: tuple[Client, Client, JobTypes, Processors, Processors],
) -> None:
    client_a, client_b, types, web_processors, batch_processors = two_clients
    charge, email, audit = (types.get(name) for name in ("shop.charge", "shop.email", "shop.audit"))
    async with client_a.transaction() as tx:
        done = await client_a.start_chains(tx, [ChainStart(job_type=charge, input=i) for i in range(3)])
        done += await client_a.start_chains(tx, [ChainStart(job_type=email, input=i) for i in range(2)])
        later = Schedule(after=timedelta(hours=1))
        await client_a.start_chains(
            tx, [ChainStart(job_type=charge, input=i, schedule=later) for i in range(2)]
        )
        await client_a.start_chains(tx, [ChainStart(job_type=audit, input=i) for i in range(4)])  # no worker
    web_metrics, batch_metrics = PrometheusMetrics(), PrometheusMetrics()
    web = Worker(client_a, web_processors, name="web", poll_interval=0.05)
    batch = Worker(client_b, batch_processors, name="batch", poll_interval=0.05)
    async with web:
        await wait_until(lambda: _running(client_a, 1), "the first worker's registration")
        async with batch:  # started after: web is the oldest running worker
            await wait_until(lambda: _running(client_a, 2), "both workers' registrations")
            for started in done:
                await client_a.await_chain(started.id, timeout=10, poll_interval=0.05)
            samplers = [web_metrics.sample_queue(web), batch_metrics.sample_queue(batch)]
            for sampler in samplers:
                await sampler.sample_once()
            stats = await client_a.queue_stats()
            scrapes = [_gauges(web_metrics), _gauges(batch_metrics)]
    # Each series comes from one scrape only: a sum over the instances counts it once.
    every = [key for scrape in scrapes for key in scrape]
    assert len(every) == len(set(every)), sorted(every)
    summed: dict[Series, float] = {}
    for scrape in scrapes:
        for key, value in scrape.items():
            summed[key] = summed.get(key, 0.0) + value
    ages = {key for key in summed if key[0] == "jobchain_queue_oldest_due_age_seconds"}
    assert {dict(labels)["job_type"] for _, labels in ages} == {"shop.audit", "shop.charge", "shop.email"}
    assert summed[("jobchain_queue_oldest_due_age_seconds", (("job_type", "shop.audit"),))] > 0
    assert {key: summed[key] for key in summed if key not in ages} == _counted(stats)
    assert summed[("jobchain_queue_depth", (("job_type", "shop.audit"),))] == 4  # a type no worker serves
    assert summed[("jobchain_queue_jobs", (("job_type", "shop.charge"), ("status", "completed")))] == 3
    assert summed[("jobchain_queue_jobs", (("job_type", "shop.charge"), ("status", "pending")))] == 2
    # The reporter is the oldest running worker overall; the other one knows which it is.
    assert sum(s.elected for s in samplers) == 1
    assert {s.reporter_id for s in samplers} == {web.worker_id}


def _memory_pair() -> tuple[Client, Client, Processors, Processors, list[datetime]]:
    """Two clients on one memory store whose clock the test moves (``now[0]``)."""
    types, web, batch = _types()
    now = [datetime(2026, 1, 1, 12, 0, tzinfo=UTC)]
    state = MemoryStateAdapter(clock=lambda: now[0])
    first, second = (Client(state, MemoryNotifyAdapter(), types) for _ in range(2))
    return first, second, web, batch, now


async def test_a_reporter_that_stops_hands_over_to_the_next_oldest_at_its_next_sample() -> None:
    client_a, client_b, web_processors, batch_processors, now = _memory_pair()
    web_metrics, batch_metrics = PrometheusMetrics(), PrometheusMetrics()
    web = Worker(client_a, web_processors, name="web", poll_interval=60)
    batch = Worker(client_b, batch_processors, name="batch", poll_interval=60)
    await web.start()
    try:
        await wait_until(lambda: _running(client_a, 1), "the first worker's registration")
        now[0] += timedelta(seconds=1)  # the second starts later: the first is the oldest
        async with batch:
            await wait_until(lambda: _running(client_a, 2), "both registrations")
            web_sampler, batch_sampler = web_metrics.sample_queue(web), batch_metrics.sample_queue(batch)
            assert await web_sampler.sample_once() is not None
            assert await batch_sampler.sample_once() is None
            assert _gauges(web_metrics)
            assert not _gauges(batch_metrics)
            await web.stop()  # stopped (or draining): no longer a running worker of the registry
            assert await batch_sampler.sample_once() is not None  # its next sample: it reports
            assert await web_sampler.sample_once() is None
            assert not _gauges(web_metrics)
            assert _gauges(batch_metrics)
            assert (web_sampler.reporter_id, batch_sampler.reporter_id) == (batch.worker_id, batch.worker_id)
    finally:
        await web.stop()


async def test_a_reporter_that_dies_hands_over_once_the_registry_says_it_is_dead() -> None:
    client_a, client_b, web_processors, batch_processors, now = _memory_pair()
    # A worker process that was killed: its row stays running until its heartbeats are missed.
    async with client_a.state.transaction() as tx:
        await tx.worker_heartbeat(
            WorkerHeartbeat(
                worker_id="killed-1",
                name="killed",
                host="elsewhere",
                pid=1,
                version="0",
                type_names=["shop.charge"],
                concurrency=1,
                inflight=0,
                state=WorkerState.RUNNING,
                alive_for=timedelta(seconds=10),
            )
        )
    now[0] += timedelta(seconds=1)
    liveness = {"heartbeat_interval": 60.0, "missed_heartbeats": 3}  # alive for 180 s of the clock
    web = Worker(client_a, web_processors, name="web", poll_interval=60, **liveness)
    batch = Worker(client_b, batch_processors, name="batch", poll_interval=60, **liveness)
    web_metrics, batch_metrics = PrometheusMetrics(), PrometheusMetrics()
    async with web, batch:
        await wait_until(lambda: _running(client_a, 3), "the two live workers' registrations")
        samplers = [web_metrics.sample_queue(web), batch_metrics.sample_queue(batch)]
        # The killed worker is still the oldest running one: nobody reports (it would have).
        assert [await s.sample_once() for s in samplers] == [None, None]
        assert {s.reporter_id for s in samplers} == {"killed-1"}
        now[0] += timedelta(seconds=20)  # its alive_until passed: the registry lists it dead
        results = [await s.sample_once() for s in samplers]
        assert [r is not None for r in results].count(True) == 1
        oldest = min((web, batch), key=lambda w: w.worker_id)  # same started_at: the smaller id
        assert {s.reporter_id for s in samplers} == {oldest.worker_id}


async def test_the_per_name_mode_reports_once_per_name() -> None:
    client_a, client_b, web_processors, batch_processors, _now = _memory_pair()
    web = Worker(client_a, web_processors, name="web", poll_interval=60)
    batch = Worker(client_b, batch_processors, name="batch", poll_interval=60)
    async with web, batch:
        await wait_until(lambda: _running(client_a, 2), "both registrations")
        samples = [
            await QueueStatsSampler(client_a, web, reporter="name").sample_once(),
            await QueueStatsSampler(client_b, batch, reporter="name").sample_once(),
        ]
    # One per name, each with the types its worker serves (zeros included).
    assert [[t.type_name for t in s.types] if s else None for s in samples] == [
        ["shop.charge"],
        ["shop.charge", "shop.email"],
    ]


async def test_a_sampler_without_a_worker_always_reports_and_cannot_be_elected() -> None:
    client_a, _client_b, web_processors, _batch, _now = _memory_pair()
    metrics = PrometheusMetrics()
    assert await metrics.sample_queue(client_a).sample_once() is not None  # nothing to elect
    for reporter in ("cluster", "name"):
        with pytest.raises(InvalidArgumentError, match="not in the worker registry"):
            QueueStatsSampler(client_a, None, reporter=reporter)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="reporter must be"):
        QueueStatsSampler(client_a, Worker(client_a, web_processors), reporter="fleet")  # type: ignore[arg-type]


def test_the_cli_option_needs_the_metrics_port() -> None:
    from jobchain.cli.worker import worker_command

    result = CliRunner().invoke(
        worker_command, ["jobchain.demo:processors", "--state", "memory://", "--queue-gauges", "name"]
    )
    assert result.exit_code == 2, result.output
    assert "--queue-gauges needs --metrics-port" in result.output


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def _scrape(port: int) -> str | None:
    try:
        async with httpx.AsyncClient() as http:
            return (await http.get(f"http://127.0.0.1:{port}/metrics")).text
    except httpx.TransportError:
        return None


async def test_two_cli_workers_of_different_names_export_the_queue_gauges_once(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    ports = [_free_port(), _free_port()]
    processes: list[asyncio.subprocess.Process] = []

    async def start(name: str, port: int, *extra: str) -> asyncio.subprocess.Process:
        process = await asyncio.create_subprocess_exec(
            *(sys.executable, "-m", "jobchain.cli", "worker", "jobchain.demo:processors", "--state", url),
            *("--name", name, "--metrics-port", str(port), *extra),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            cwd=tmp_path,
        )
        processes.append(process)
        return process

    async def gauges_of(port: int) -> str | None:
        text = await _scrape(port)
        return text if text is not None and "jobchain_queue_jobs{" in text else None

    try:
        await start("web", ports[0], "--migrate")
        # A fresh interpreter imports the CLI and connects first: allow a loaded machine time.
        await wait_until(lambda: gauges_of(ports[0]), "the first worker's queue gauges", bound=60)
        batch = await start("batch", ports[1])
        assert batch.stdout is not None
        seen: list[str] = []
        async with asyncio.timeout(60):  # its sampler says who reports once its worker is listed
            while "reports the queue gauges, not this one (reporter=cluster)" not in "".join(seen):
                line = await batch.stdout.readline()
                assert line, "".join(seen)
                seen.append(line.decode())
        batch_text = await _scrape(ports[1])
        web_text = await _scrape(ports[0])
    finally:
        for process in processes:
            process.send_signal(signal.SIGTERM)
        async with asyncio.timeout(30):
            for process in processes:
                await process.communicate()
    assert batch_text is not None
    assert web_text is not None
    assert "jobchain_jobs_started_total" in batch_text  # its endpoint serves: counters, no gauges
    assert "jobchain_queue_jobs{" not in batch_text
    assert 'jobchain_queue_jobs{job_type="demo.place_order",status="pending"} 0.0' in web_text
    assert [p.returncode for p in processes] == [0, 0]
