"""The worker's heartbeat: its registry row, dead workers' jobs released, outages survived.

Heartbeat intervals are tiny and every wait is for a condition (bounded far above what a
passing run needs); where timing itself is the point, the clock is injected.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import pytest

from jobchain import Client, JobStatus, JobTypes, WorkerInfo, WorkerState
from jobchain.contracts import Event, JobsAcquire, WorkerHeartbeat
from jobchain.errors import InvalidArgumentError, SchemaNotMigratedError, TransientStateError
from jobchain.memory.notify import MemoryNotifyAdapter
from jobchain.memory.state import MemoryStateAdapter
from jobchain.worker import Attempt, Backoff, Completed, Processors, Worker, WorkerLoad
from jobchain.worker.heartbeat import Heartbeat, WorkerIdentity, library_version

T = TypeVar("T")
BOUND = 10.0
"""Upper bound of every wait; a passing run needs a small fraction of it."""

types = JobTypes()
work = types.define("hb.work", input=int, output=int, entry=True)


async def wait_until(probe: Callable[[], Awaitable[T | None]], what: str) -> T:
    """Re-run ``probe`` until it returns something truthy; fail after BOUND seconds."""
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
    """An observer keeping every event."""

    def __init__(self) -> None:
        self.events: list[Event] = []

    def on_event(self, event: Event) -> None:
        self.events.append(event)

    def named(self, name: str) -> list[dict[str, Any]]:
        return [dict(e.attributes) for e in self.events if e.name == name]


class FlakyState(MemoryStateAdapter):
    """A memory adapter that can be taken down: every new transaction fails while ``down``."""

    def __init__(self, clock: Callable[[], datetime] | None = None) -> None:
        super().__init__(clock)
        self.down = False
        self.heartbeats: list[WorkerHeartbeat] = []

    def transaction(self, *, read_only: bool = False, connection: object | None = None) -> Any:
        return self._maybe_down(super().transaction(read_only=read_only, connection=connection))

    @asynccontextmanager
    async def _maybe_down(self, opened: Any) -> AsyncIterator[Any]:
        if self.down:
            raise TransientStateError("injected: the database is down")
        async with opened as tx:
            heartbeat = tx.worker_heartbeat

            async def recorded(params: WorkerHeartbeat) -> Any:
                self.heartbeats.append(params)
                return await heartbeat(params)

            tx.worker_heartbeat = recorded
            yield tx


def processors(handler: Callable[[Attempt[int, int]], Awaitable[Completed]] | None = None) -> Processors:
    procs = Processors()

    async def echo(attempt: Attempt[int, int]) -> Completed:
        return await attempt.complete(attempt.input)

    procs.register(work, handler or echo)
    return procs


async def row_of(client: Client, worker_id: str) -> WorkerInfo | None:
    return next((row for row in await client.list_workers() if row.id == worker_id), None)


async def start(client: Client, n: int) -> str:
    async with client.transaction() as tx:
        started = await client.start_chain(tx, work, n)
    return started.id


# ---------------------------------------------------------------- the registry row


async def test_a_running_worker_heartbeats_a_row_with_its_fields() -> None:
    client = Client(MemoryStateAdapter(), MemoryNotifyAdapter(), types)
    worker = Worker(client, processors(), name="rowtest", concurrency=3, heartbeat_interval=0.05)
    async with worker:
        row = await wait_until(lambda: row_of(client, worker.worker_id), "the worker's row")
        later = await wait_until(
            lambda: _seen_after(client, worker.worker_id, row.last_seen_at), "a second heartbeat"
        )

    assert row.name == "rowtest"
    assert row.host == socket.gethostname()
    assert row.pid == os.getpid()
    assert row.version == library_version() != ""
    assert row.type_names == ("hb.work",)
    assert row.concurrency == 3
    assert row.inflight == 0
    assert row.state is WorkerState.RUNNING
    assert row.alive_until - row.last_seen_at == timedelta(seconds=0.05 * 3)
    assert later.started_at == row.started_at
    assert later.last_seen_at > row.last_seen_at


async def _seen_after(client: Client, worker_id: str, after: datetime) -> WorkerInfo | None:
    row = await row_of(client, worker_id)
    return row if row is not None and row.last_seen_at > after else None


async def test_the_row_says_draining_while_stopping_and_stopped_after() -> None:
    client = Client(MemoryStateAdapter(), MemoryNotifyAdapter(), types)
    running = asyncio.Event()
    finish = asyncio.Event()

    async def slow(attempt: Attempt[int, int]) -> Completed:
        running.set()
        await finish.wait()
        return await attempt.complete(attempt.input)

    # A heartbeat interval far longer than the case: the draining row can only come from stop().
    worker = Worker(client, processors(slow), heartbeat_interval=60, shutdown_timeout=BOUND)
    await worker.start()
    await start(client, 1)
    await asyncio.wait_for(running.wait(), BOUND)
    stopping = asyncio.create_task(worker.stop())

    async def draining() -> WorkerInfo | None:
        row = await row_of(client, worker.worker_id)
        return row if row is not None and row.state is WorkerState.DRAINING else None

    row = await wait_until(draining, "the draining row")
    finish.set()
    await stopping
    final = await row_of(client, worker.worker_id)

    assert row.inflight == 1
    assert final is not None
    assert final.state is WorkerState.STOPPED
    assert final.inflight == 0


async def test_worker_settings_for_heartbeats_are_checked() -> None:
    client = Client(MemoryStateAdapter(), None, types)
    with pytest.raises(InvalidArgumentError, match="heartbeat_interval"):
        Worker(client, processors(), heartbeat_interval=0)
    with pytest.raises(InvalidArgumentError, match="missed_heartbeats"):
        Worker(client, processors(), missed_heartbeats=1)


# ---------------------------------------------------------------- dead workers


async def _ghost_holds_a_job(state: MemoryStateAdapter, client: Client, *, alive_for: timedelta) -> str:
    """A worker that heartbeated once and then died holding a job (with a lease of an hour)."""
    job_id = await start(client, 7)
    async with state.transaction() as tx:
        await tx.worker_heartbeat(
            WorkerHeartbeat(
                worker_id="ghost-1",
                name="ghost",
                host="elsewhere",
                pid=1,
                version="0",
                type_names=["hb.work"],
                concurrency=1,
                inflight=1,
                state=WorkerState.RUNNING,
                alive_for=alive_for,
            )
        )
        claimed = await tx.jobs_acquire(
            JobsAcquire(type_names=["hb.work"], worker_id="ghost-1", lease_for=timedelta(hours=1))
        )
    assert [job.id for job in claimed.jobs] == [job_id]
    return job_id


async def test_a_dead_workers_job_is_released_and_run_by_another_worker(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="jobchain.worker")
    state = MemoryStateAdapter()
    recorder = Recorder()
    client = Client(state, MemoryNotifyAdapter(), types, observers=[recorder])
    job_id = await _ghost_holds_a_job(state, client, alive_for=timedelta(milliseconds=50))

    # The job's lease lasts an hour: only the registry can bring it back during this case.
    worker = Worker(client, processors(), heartbeat_interval=0.05, missed_heartbeats=4)
    async with worker:
        chain = await client.await_chain(job_id, timeout=BOUND, poll_interval=0.05)

    job = chain.last
    assert chain.output == 7
    assert job.completed_by == worker.worker_id
    assert job.attempt == 2
    assert job.rescue_reason == "worker_dead"
    assert job.rescued_from == "ghost-1"
    assert job.rescued_at is not None
    ghost = await row_of(client, "ghost-1")
    assert ghost is not None
    assert ghost.state is WorkerState.DEAD
    lines = [r.getMessage() for r in caplog.records if "presumed dead" in r.getMessage()]
    assert len(lines) == 1
    assert lines[0].startswith("worker ghost-1 presumed dead (no heartbeat since 20")
    assert lines[0].endswith(f"released 1 job(s): {job_id} (hb.work)")
    rescued = recorder.named("job_rescued")
    assert [(e["job.id"], e["rescued_from"], e["reason"]) for e in rescued] == [
        (job_id, "ghost-1", "worker_dead")
    ]


class ManualClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _heartbeat(client: Client, clock: ManualClock, **options: Any) -> Heartbeat:
    identity = WorkerIdentity(worker_id="me-1", name="me", type_names=("hb.work",), concurrency=1)
    return Heartbeat(
        client,
        identity,
        interval=options.pop("interval", 2.0),
        missed=options.pop("missed", 3),
        load=lambda: WorkerLoad(inflight=0, buffered=0, committing=0, capacity=1),
        on_beat=options.pop("on_beat", lambda result, recovered: None),
        on_fatal=lambda error: None,
        emit=_quiet,
        clock=clock,
    )


def _quiet(name: str, attributes: dict[str, Any], /, *, log_line: bool = True) -> None:
    """An event sink that drops everything."""


async def test_release_dead_only_after_alive_for_of_continuous_success() -> None:
    state = FlakyState()
    client = Client(state, None, types)
    clock = ManualClock()
    heartbeat = _heartbeat(client, clock)  # alive_for = 6 s

    async def sent_release_dead() -> bool:
        assert await heartbeat.beat() is not None
        return state.heartbeats[-1].release_dead

    assert await sent_release_dead() is False  # t=0: the first success starts the run
    clock.now += 5.9
    assert await sent_release_dead() is False
    clock.now += 0.1
    assert await sent_release_dead() is True  # 6 s of success
    state.down = True
    clock.now += 1
    assert await heartbeat.beat() is None  # an outage ends the run
    state.down = False
    clock.now += 1
    assert await sent_release_dead() is False  # back, but not yet for 6 s
    clock.now += 5.9
    assert await sent_release_dead() is False
    clock.now += 0.1
    assert await sent_release_dead() is True
    # A stall: no failure, but 7 s between two heartbeats (longer than alive_for).
    clock.now += 7
    assert await sent_release_dead() is True  # decided before the stall showed
    clock.now += 1
    assert await sent_release_dead() is False  # the gap restarted the count
    clock.now += 5.5
    assert await sent_release_dead() is True


async def test_a_stopped_workers_final_heartbeat_never_releases() -> None:
    state = FlakyState()
    client = Client(state, None, types)
    clock = ManualClock()
    heartbeat = _heartbeat(client, clock)
    await heartbeat.beat()
    clock.now += 10
    heartbeat.start()
    await heartbeat.stop()
    assert state.heartbeats[-1].state is WorkerState.STOPPED
    assert state.heartbeats[-1].release_dead is False


async def test_a_worker_presumed_dead_warns_and_rejoins_under_a_new_incarnation(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="jobchain.worker")
    now = datetime(2030, 1, 1, tzinfo=UTC)
    state = MemoryStateAdapter(clock=lambda: now)
    client = Client(state, None, types)
    heartbeat = _heartbeat(client, ManualClock())
    assert await heartbeat.beat() is not None
    now += timedelta(seconds=10)  # past alive_for (6 s): another worker marks it dead
    async with state.transaction() as tx:
        other = await tx.worker_heartbeat(
            WorkerHeartbeat(
                worker_id="other-1",
                name="other",
                host="h",
                pid=2,
                version="0",
                type_names=["hb.work"],
                concurrency=1,
                inflight=0,
                state=WorkerState.RUNNING,
                alive_for=timedelta(seconds=6),
                release_dead=True,
            )
        )
    assert other.dead_worker_ids == ["me-1"]

    result = await heartbeat.beat()

    assert result is not None
    assert result.was_dead
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "worker me-1 was presumed dead" in warnings[0]
    assert "aborts their attempts and rejoins" in warnings[0]
    assert heartbeat.incarnation == 2
    rejoined = await heartbeat.beat()
    assert rejoined is not None
    assert not rejoined.was_dead
    row = await row_of(client, "me-1")
    assert row is not None
    assert row.state is WorkerState.RUNNING


# ---------------------------------------------------------------- outages


async def test_a_heartbeat_after_an_outage_wakes_the_loop_at_once(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="jobchain.worker")
    state = FlakyState()
    recorder = Recorder()
    client = Client(state, None, types, observers=[recorder])
    job_id = await start(client, 5)
    state.down = True
    # After a failure the loop would sleep an hour and poll once an hour: only the heartbeat
    # that gets through again can make it claim during this case.
    hour = timedelta(hours=1)
    worker = Worker(
        client,
        processors(),
        heartbeat_interval=0.05,
        poll_interval=3600,
        recovery=Backoff(initial=hour, maximum=hour),
    )
    async with worker:

        async def failed_twice() -> bool:
            beats = [e for e in recorder.named("worker_error") if e.get("operation") == "worker_heartbeat"]
            return len(beats) >= 2

        await wait_until(failed_twice, "the heartbeat to fail twice")
        await wait_until(_logged(caplog, "loop failed"), "the loop to fail and back off")
        state.down = False
        chain = await client.await_chain(job_id, timeout=BOUND, poll_interval=0.05)

    assert chain.output == 5
    messages = [r.getMessage() for r in caplog.records]
    # One warning for the whole outage (however many heartbeats failed), one line when it ended.
    assert sum("heartbeat failed" in m for m in messages) == 1
    assert sum("heartbeat works again" in m for m in messages) == 1
    assert sum(f"worker {worker.worker_id} loop failed" in m for m in messages) == 1
    assert not any(m.startswith("worker_error") for m in messages)  # no line per failed try
    # Observers still see every failure.
    failed_beats = [e for e in recorder.named("worker_error") if e.get("operation") == "worker_heartbeat"]
    assert len(failed_beats) >= 2


def _logged(caplog: pytest.LogCaptureFixture, text: str) -> Callable[[], Awaitable[bool]]:
    async def probe() -> bool:
        return any(text in r.getMessage() for r in caplog.records)

    return probe


async def test_a_job_whose_worker_dies_in_an_outage_waits_for_a_full_alive_for() -> None:
    """After an outage no worker is declared dead before it had alive_for to heartbeat again."""
    now = datetime(2030, 1, 1, tzinfo=UTC)
    state = FlakyState(clock=lambda: now)
    client = Client(state, None, types)
    clock = ManualClock()
    survivor = _heartbeat(client, clock)
    await survivor.beat()
    clock.now += 6
    assert await survivor.beat() is not None
    assert survivor.releases_dead()
    # A peer that heartbeated just before a 60 s outage.
    job_id = await _ghost_holds_a_job(state, client, alive_for=timedelta(seconds=6))
    state.down = True
    now += timedelta(seconds=60)
    clock.now += 60
    assert await survivor.beat() is None
    state.down = False
    result = await survivor.beat()  # the database is back; the peer has not beaten yet

    assert result is not None
    assert result.released_jobs == []
    job = await client.get_job(job_id)
    assert job is not None
    assert job.status is JobStatus.RUNNING
    # The peer stays silent for the survivor's next alive_for: now it is dead.
    now += timedelta(seconds=6)
    clock.now += 6
    result = await survivor.beat()
    assert result is not None
    assert [job.id for job in result.released_jobs] == [job_id]


async def test_a_registry_table_that_is_missing_stops_the_worker() -> None:
    class Unmigrated(MemoryStateAdapter):
        def transaction(self, *, read_only: bool = False, connection: object | None = None) -> Any:
            return self._without_registry(super().transaction(read_only=read_only, connection=connection))

        @asynccontextmanager
        async def _without_registry(self, opened: Any) -> AsyncIterator[Any]:
            async with opened as tx:

                async def missing(params: WorkerHeartbeat) -> Any:
                    raise SchemaNotMigratedError("injected: the worker table is missing")

                tx.worker_heartbeat = missing
                yield tx

    client = Client(Unmigrated(), None, types)
    worker = Worker(client, processors(), poll_interval=3600)
    await worker.start()
    with pytest.raises(SchemaNotMigratedError):
        await asyncio.wait_for(worker.wait(), BOUND)
    await worker.stop()


# ---------------------------------------------------------------- list_workers


async def test_list_workers_filters_by_state_and_checks_its_argument() -> None:
    state = MemoryStateAdapter()
    client = Client(state, None, types)
    await _ghost_holds_a_job(state, client, alive_for=timedelta(hours=1))

    assert [row.id for row in await client.list_workers(states=["running"])] == ["ghost-1"]
    assert await client.list_workers(states=[WorkerState.DEAD]) == []
    with pytest.raises(InvalidArgumentError, match="states must be among"):
        await client.list_workers(states=["sleeping"])
    with pytest.raises(InvalidArgumentError, match="must be a list"):
        await client.list_workers(states="running")  # a bare string: the mistake under test
