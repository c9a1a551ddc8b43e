"""Liveness: a running worker is seen alive, and one that falls silent is presumed dead.

The worker registry end to end, over any (state, notify) pair:

* a started worker is listed with a ``last_seen_at`` at the case's clock, alive for
  ``heartbeat_interval * missed_heartbeats`` after it, and its heartbeats move both forward
  as the clock moves;
* a worker whose heartbeats stop landing (they report success and write nothing, while the
  worker goes on holding its job) stays alive until its ``alive_until`` passes on the clock,
  then is presumed dead, and a healthy worker rescues its running job (``rescue_reason =
  "worker_dead"``) long before the job's lease ends.

No wall-clock window: registry rows follow the case's clock (:meth:`IntegrationEnv.clock`),
which stands still until the case moves it, and each step waits for an event (a heartbeat
that landed, a chain that completed) bounded by the suite's wait timeout. The one loop-time
span is the rescuer's own: a worker declares others dead only after its heartbeats have gone
through for its ``alive_for`` (a second here) with no gap as long.

The liveness rule of every case (:mod:`._worker_errors`) is the other half: a heartbeat,
reap or claim that keeps raising fails whichever case meets it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta

from jobchain import Chain, Client, Job, JobStatus, JobTypes, WorkerInfo, WorkerState
from jobchain.contracts import StateTx, WorkerHeartbeat, WorkerHeartbeatResult
from jobchain.testing import FrozenClock
from jobchain.worker import Attempt, Completed, LeaseConfig, Processors, Worker
from jobchain_conformance.suites._integration_base import IntegrationEnv, Tag
from jobchain_conformance.suites._integration_wrappers import StateProxy, as_state

BEAT = 0.05
"""Heartbeat interval of the workers in these cases (seconds of loop time)."""

MISSED = 20
"""Their missed heartbeats: a row is alive for a second of the case's clock after each
heartbeat, and a live worker declares others dead after a second of its own loop time of
heartbeats gone through."""

ALIVE_FOR = timedelta(seconds=BEAT * MISSED)

TEN_MINUTES = LeaseConfig(duration=timedelta(minutes=10), renew_every=timedelta(minutes=5))
"""A lease no case outlives: only the registry can rescue a job held with it."""


class LivenessTests:
    """A worker's heartbeats keep its registry row current; a silent worker's job is rescued."""

    async def test_a_running_worker_is_listed_and_its_heartbeats_follow_the_clock(
        self, env: IntegrationEnv
    ) -> None:
        types = JobTypes()
        work = types.define("work", input=None, output=None, entry=True)
        procs = Processors()

        @procs.handler(work)
        async def handle(attempt: Attempt[None, None]) -> Completed:
            return await attempt.complete(None)

        clock = env.clock()
        client = env.client(types, clock=clock)
        worker = env.worker(client, procs, heartbeat_interval=BEAT, missed_heartbeats=MISSED)
        precision = env.state.time_precision
        async with worker:
            seen_at: list[datetime] = []
            for step in range(4):
                # Half an alive_for per step: the row never lapses between two heartbeats.
                moment = clock.advance(ALIVE_FOR / 2) if step else clock()
                row = await env.wait_for(
                    _row_seen_at(client, worker, moment - precision),
                    f"a heartbeat at the clock's time (step {step})",
                )
                assert row.state is WorkerState.RUNNING
                assert abs(row.last_seen_at - moment) <= precision, (
                    f"last_seen_at {row.last_seen_at} is not the clock's time {moment}"
                )
                assert abs(row.alive_until - (row.last_seen_at + ALIVE_FOR)) <= precision, (
                    f"alive_until {row.alive_until} is not last_seen_at {row.last_seen_at} + {ALIVE_FOR}"
                )
                seen_at.append(row.last_seen_at)

        assert seen_at == sorted(set(seen_at)), f"last_seen_at did not move forward at each step: {seen_at}"
        assert row.name == "worker"
        assert row.type_names == ("work",)
        assert row.started_at <= seen_at[0] + precision

    async def test_a_worker_whose_heartbeats_stop_is_presumed_dead_and_its_job_rescued(
        self, env: IntegrationEnv
    ) -> None:
        types = JobTypes()
        work = types.define("work", input=None, output=Tag, entry=True)
        procs = Processors()
        running = asyncio.Event()
        release = asyncio.Event()

        @procs.handler(work)
        async def handle(attempt: Attempt[None, Tag]) -> Completed:
            if attempt.job.attempt == 1:
                await attempt.prepare("staged")
                running.set()
                # Holds the silent worker's only slot, whatever its abort signal says, so the
                # rescued job can only run on the other worker.
                await env.wait_event(release, "the case to release the silent worker's handler")
            return await attempt.complete(Tag(tag=attempt.worker_id))

        clock = env.clock()
        client = env.client(types, clock=clock)
        silent_state = StateProxy(env.state)
        rescuer_state = StateProxy(env.state)
        silenced = _silence_heartbeats(silent_state)
        releasing = _record_releasing_heartbeats(rescuer_state)
        options = {"heartbeat_interval": BEAT, "missed_heartbeats": MISSED, "lease": TEN_MINUTES}
        silent = env.worker(env.client(types, state=as_state(silent_state), clock=clock), procs, **options)
        rescuer = env.worker(env.client(types, state=as_state(rescuer_state), clock=clock), procs, **options)
        async with silent:
            started = await env.start(client, work, None)
            await env.wait_event(running, "the silent worker to start the job")
            try:
                chain, rescued, dead = await _silence_then_rescue(
                    env, client, clock, silent, rescuer, started.id, silenced, releasing
                )
            finally:
                release.set()  # before the silent worker stops: it waits for its handler

        assert chain.output == {"tag": rescuer.worker_id}
        assert rescued.rescue_reason == "worker_dead"
        assert rescued.rescued_from == silent.worker_id
        assert rescued.completed_by == rescuer.worker_id
        assert rescued.attempt == 2
        assert dead == [silent.worker_id]


async def _silence_then_rescue(
    env: IntegrationEnv,
    client: Client,
    clock: FrozenClock,
    silent: Worker,
    rescuer: Worker,
    job_id: str,
    silenced: _Silencer,
    releasing: list[WorkerHeartbeatResult],
) -> tuple[Chain, Job, list[str]]:
    """Silence ``silent``'s heartbeats while it runs ``job_id``; check it stays alive until its
    ``alive_until`` passes on the clock, then that ``rescuer`` rescues and completes the job.
    Returns the completed chain, the rescued job and the ids of the workers listed dead."""
    precision = env.state.time_precision
    before = await env.wait_for(_row_seen_at(client, silent, clock() - precision), "the worker's heartbeat")
    silenced.set()
    # Once one heartbeat was silenced none is in flight: the row is final.
    await env.wait_for(_async(lambda: silenced.count > 0), "a silenced heartbeat")
    (last,) = [row for row in await client.list_workers() if row.id == silent.worker_id]
    assert last.last_seen_at >= before.last_seen_at

    # Still alive on the clock: a healthy peer's heartbeats release nothing.
    clock.advance(ALIVE_FOR / 2)
    async with rescuer:
        await env.wait_for(_async(lambda: len(releasing) >= 2), "the healthy worker to look for dead workers")
        job = await env.job(client, job_id)
        early = f"a worker was presumed dead before its alive_until passed: {job}"
        assert job.status is JobStatus.RUNNING, early
        assert job.leased_by == silent.worker_id, early
        assert all(not result.released_jobs for result in releasing)
        (alive,) = [row for row in await client.list_workers() if row.id == silent.worker_id]
        assert alive.state is WorkerState.RUNNING

        # Past its alive_until: presumed dead, its job runs again on the rescuer.
        clock.advance(ALIVE_FOR)
        chain = await env.await_chain(client, job_id)
        rescued = await env.job(client, job_id)
        dead = [row.id for row in await client.list_workers(states=[WorkerState.DEAD])]
    return chain, rescued, dead


class _Silencer:
    """Switches a proxy's heartbeats to report success and write nothing (a stalled registry)."""

    def __init__(self) -> None:
        self.on = False
        self.count = 0
        """Heartbeats silenced so far."""

    def set(self) -> None:
        self.on = True


def _silence_heartbeats(proxy: StateProxy) -> _Silencer:
    silencer = _Silencer()

    async def heartbeat(tx: StateTx, params: WorkerHeartbeat) -> WorkerHeartbeatResult:
        if not silencer.on:
            return await tx.worker_heartbeat(params)
        silencer.count += 1
        return WorkerHeartbeatResult()

    proxy.overrides["worker_heartbeat"] = heartbeat
    return silencer


def _record_releasing_heartbeats(proxy: StateProxy) -> list[WorkerHeartbeatResult]:
    """The results of the proxy's heartbeats that looked for dead workers, once each landed."""
    results: list[WorkerHeartbeatResult] = []

    async def heartbeat(tx: StateTx, params: WorkerHeartbeat) -> WorkerHeartbeatResult:
        result = await tx.worker_heartbeat(params)
        if params.release_dead:
            results.append(result)
        return result

    proxy.overrides["worker_heartbeat"] = heartbeat
    return results


def _row_seen_at(
    client: Client, worker: Worker, moment: datetime
) -> Callable[[], Awaitable[WorkerInfo | None]]:
    """A probe: the worker's registry row once its ``last_seen_at`` is ``moment`` or later."""

    async def probe() -> WorkerInfo | None:
        for row in await client.list_workers():
            if row.id == worker.worker_id and row.last_seen_at >= moment:
                return row
        return None

    return probe


def _async(check: Callable[[], bool]) -> Callable[[], Awaitable[bool]]:
    """``check`` as the async probe :meth:`IntegrationEnv.wait_for` takes."""

    async def probe() -> bool:
        return check()

    return probe
