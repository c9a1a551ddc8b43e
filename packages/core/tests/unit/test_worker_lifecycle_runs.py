"""The worker's lifecycle, run over the in-process adapters: publishing after a failure,
quiet cancellation, batches past their limits and deadlines, bounded prune runs."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import pytest

from jobchain import Client, FailJob, JobStatus, JobTypes, Retention, Schedule
from jobchain.contracts import ChainsPrune, ChainsPruned, Event, PrunedChain
from jobchain.memory.notify import MemoryNotifyAdapter
from jobchain.memory.state import MemoryStateAdapter
from jobchain.worker import AbortReason, Attempt, Backoff, Batch, Completed, Processors, Worker
from jobchain.worker.retention import Pruner

T = TypeVar("T")
BOUND = 10.0
"""Upper bound of every wait; a passing run needs a small fraction of it."""
ZERO = Backoff(initial=timedelta(0), maximum=timedelta(0))
NOW = datetime(2026, 1, 1, tzinfo=UTC)


async def wait_until(probe: Callable[[], Awaitable[T | None]], what: str) -> T:
    try:
        async with asyncio.timeout(BOUND):
            while True:
                value = await probe()
                if value:
                    return value
                await asyncio.sleep(0.01)
    except TimeoutError:
        pytest.fail(f"timed out waiting for {what}")


class Recorder:
    def __init__(self) -> None:
        self.events: list[Event] = []

    def on_event(self, event: Event) -> None:
        self.events.append(event)

    def named(self, name: str) -> list[Event]:
        return [e for e in self.events if e.name == name]


# ---------------------------------------------------------------- a worker over the in-process adapters


async def test_a_failure_publishes_every_finished_chain_and_the_unblocked_dependents() -> None:
    types = JobTypes()
    source = types.define("src", input=None, output=None, entry=True)
    dependent = types.define("dep", input=None, output=None, entry=True)
    tolerant = types.define("tol", input=None, output=None, entry=True, runs_after_failed_blockers=True)
    procs = Processors()

    @procs.handler(source)
    async def fail(attempt: Attempt[None, None]) -> Completed:
        raise FailJob("broken")

    notify = MemoryNotifyAdapter()
    observed = Recorder()
    client = Client(MemoryStateAdapter(), notify, types, observers=[observed])
    async with client.transaction() as tx:
        head = (await client.start_chain(tx, source, None, schedule=Schedule(after=timedelta(hours=1)))).chain
        dep = (await client.start_chain(tx, dependent, None, blockers=[head])).chain
        tol = (await client.start_chain(tx, tolerant, None, blockers=[head])).chain
    finished: list[str] = []
    scheduled: list[str] = []
    for chain_id in (head.id, dep.id):
        await notify.listen_chain_completed(chain_id, finished.append)
    await notify.listen_job_scheduled(["tol"], scheduled.append)
    async with Worker(client, procs, retry=ZERO, poll_interval=0.05):
        async with client.transaction() as tx:
            await client.trigger_job(tx, head.id)

        async def failed() -> bool:
            return len(finished) == 2 and bool(scheduled)

        await wait_until(failed, "both chains to finish and the tolerant job to be scheduled")
    assert sorted(finished) == sorted([head.id, dep.id])
    assert scheduled == ["tol"]
    assert (await client.get_job(tol.id)) is not None
    final = [e for e in observed.named("job_attempt_failed") if e.attributes.get("final")]
    assert [e.attributes["reason"] for e in final] == ["fail_job"]
    assert {e.attributes["job_id"] for e in observed.named("job_failed")} == {head.id, dep.id}


async def test_a_cancelled_attempt_stops_quietly(caplog: pytest.LogCaptureFixture) -> None:
    types = JobTypes()
    job_type = types.define("quiet", input=None, output=None, entry=True)
    procs = Processors()
    running = asyncio.Event()
    reasons: list[AbortReason] = []

    @procs.handler(job_type)
    async def handle(attempt: Attempt[None, None]) -> Completed:
        await attempt.prepare("staged")
        running.set()
        async with asyncio.timeout(BOUND):
            reasons.append(await attempt.signal.wait())
        return await attempt.complete(None)

    observed = Recorder()
    client = Client(MemoryStateAdapter(), MemoryNotifyAdapter(), types, observers=[observed])
    async with client.transaction() as tx:
        started = (await client.start_chain(tx, job_type, None)).chain
    caplog.set_level(logging.INFO, logger="jobchain")
    worker = Worker(client, procs, retry=ZERO, poll_interval=0.05)
    async with worker:
        async with asyncio.timeout(BOUND):
            await running.wait()
        async with client.transaction() as tx:
            await client.cancel_chain(tx, started.id, reason="stop")

        async def ended() -> bool:
            return bool(reasons) and not worker.inflight_job_ids

        await wait_until(ended, "the attempt to end")
    assert reasons == [AbortReason.CANCELLED]
    assert [e.name for e in observed.events if e.name.startswith("job_attempt_")][
        -1
    ] == "job_attempt_cancelled"
    noisy = [r for r in caplog.records if r.levelno >= logging.WARNING and r.name.startswith("jobchain")]
    assert noisy == []
    job = await client.get_job(started.id)
    assert job is not None
    assert job.status is JobStatus.CANCELLED


class PruneScript(MemoryStateAdapter):
    """Answers ``chains_prune`` from a script of results; records each request."""

    def __init__(self, results: list[ChainsPruned]) -> None:
        super().__init__()
        self.results = results
        self.requests: list[ChainsPrune] = []

    def transaction(self, *, read_only: bool = False, connection: object | None = None) -> Any:
        opened = super().transaction(read_only=read_only, connection=connection)
        script = self

        class Wrapped:
            async def __aenter__(self) -> Any:
                tx = await opened.__aenter__()

                async def chains_prune(params: ChainsPrune) -> ChainsPruned:
                    script.requests.append(params)
                    return script.results.pop(0)

                tx.chains_prune = chains_prune  # type: ignore[method-assign]
                return tx

            async def __aexit__(self, *exc: Any) -> Any:
                return await opened.__aexit__(*exc)

        return Wrapped()


def _pruned(*statuses: str) -> ChainsPruned:
    return ChainsPruned(
        chains=[PrunedChain(id=f"c{i}", type_name="t", status=status) for i, status in enumerate(statuses)]
    )


async def test_a_prune_run_deletes_bounded_batches_and_reports_them() -> None:
    state = PruneScript(
        [_pruned("completed", "completed"), _pruned("completed", "cancelled"), _pruned("failed")]
    )
    client = Client(state, None, JobTypes(), clock=lambda: NOW)
    emitted: list[tuple[str, dict[str, Any]]] = []

    def emit(name: str, attributes: dict[str, Any], /, *, log_line: bool = True) -> None:
        emitted.append((name, attributes))

    retention = Retention(completed=timedelta(days=1), failed=timedelta(days=2), batch_size=2, max_batches=2)
    pruner = Pruner(client, retention, "w", emit=emit, recovery=ZERO)
    pruned = await pruner.prune()
    assert len(pruned) == 4  # two full batches; the third waits for the next run
    assert [r.completed_before for r in state.requests] == [NOW - timedelta(days=1)] * 2
    assert state.requests[0].failed_before == NOW - timedelta(days=2)
    assert state.requests[0].cancelled_before is None
    assert emitted == [
        (
            "chains_pruned",
            {"count": 4, "by_status": {"completed": 3, "cancelled": 1}, "by_type": {"t": 4}},
        )
    ]


async def test_a_busy_prune_deletes_nothing_and_reports_nothing() -> None:
    state = PruneScript([ChainsPruned(busy=True)])
    client = Client(state, None, JobTypes(), clock=lambda: NOW)
    emitted: list[str] = []
    pruner = Pruner(
        client,
        Retention(completed=timedelta(days=1)),
        "w",
        emit=lambda name, attributes, /, *, log_line=True: emitted.append(name),
        recovery=ZERO,
    )
    assert await pruner.prune() == []
    assert len(state.requests) == 1
    assert emitted == []


async def test_batch_jobs_fail_when_their_attempts_run_out_and_a_slow_batch_times_out() -> None:
    types = JobTypes()
    fragile = types.define("fragile", input=int, output=int, entry=True, max_attempts=2)
    slow = types.define("slow", input=int, output=int, entry=True, max_attempts=1)
    procs = Processors()
    calls: list[list[int]] = []

    @procs.batch_handler(fragile)
    async def fragile_batch(batch: Batch[int, int]) -> Sequence[int | BaseException]:
        calls.append([job.attempt for job in batch.jobs])
        return [ValueError("odd") if n % 2 else n for n in batch.inputs]

    @procs.batch_handler(slow, timeout=0.05)
    async def slow_batch(batch: Batch[int, int]) -> Sequence[int | BaseException]:
        await asyncio.sleep(BOUND)
        return list(batch.inputs)

    client = Client(MemoryStateAdapter(), MemoryNotifyAdapter(), types)
    async with client.transaction() as tx:
        odd = (await client.start_chain(tx, fragile, 1)).chain
        even = (await client.start_chain(tx, fragile, 2)).chain
        stuck = (await client.start_chain(tx, slow, 3)).chain
    async with Worker(client, procs, retry=ZERO, poll_interval=0.05):

        async def settled() -> bool:
            jobs = [await client.get_job(c.id) for c in (odd, even, stuck)]
            return all(j is not None and j.status.terminal for j in jobs)

        await wait_until(settled, "every batch job to finish")
    odd_job, even_job, stuck_job = [await client.get_job(c.id) for c in (odd, even, stuck)]
    assert odd_job is not None
    assert even_job is not None
    assert stuck_job is not None
    assert (odd_job.status, odd_job.attempt) == (JobStatus.FAILED, 2)
    assert [e.error_type for e in odd_job.attempt_errors] == ["ValueError", "ValueError"]
    assert even_job.status is JobStatus.COMPLETED
    assert stuck_job.status is JobStatus.FAILED
    assert [e.error_type for e in stuck_job.attempt_errors] == ["JobTimeoutError"]


async def test_a_timeout_is_reported_to_observers() -> None:
    types = JobTypes()
    job_type = types.define("late", input=None, output=None, entry=True, timeout=0.05, max_attempts=1)
    procs = Processors()

    @procs.handler(job_type)
    async def handle(attempt: Attempt[None, None]) -> Completed:
        await asyncio.sleep(BOUND)
        return await attempt.complete(None)

    observed = Recorder()
    client = Client(MemoryStateAdapter(), None, types, observers=[observed])
    async with client.transaction() as tx:
        started = (await client.start_chain(tx, job_type, None)).chain
    async with Worker(client, procs, retry=ZERO, poll_interval=0.05):

        async def failed() -> bool:
            job = await client.get_job(started.id)
            return job is not None and job.status is JobStatus.FAILED

        await wait_until(failed, "the timed-out job to fail")
    [timed_out] = observed.named("job_timed_out")
    assert timed_out.attributes["timeout"] == 0.05
    assert timed_out.attributes["job.id"] == started.id
    final = [e for e in observed.named("job_attempt_failed") if e.attributes.get("final")]
    assert [(e.attributes["error.type"], e.attributes["reason"]) for e in final] == [
        ("JobTimeoutError", "attempts_exhausted")
    ]
