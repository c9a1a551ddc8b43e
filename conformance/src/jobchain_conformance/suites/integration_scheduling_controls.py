"""Scheduling controls end to end (client + workers): periodic schedules and dynamic blockers.

Periodic cases drive every worker's scheduler with an injected clock
(``worker.scheduler.run_due(now)``, called from several workers at once) and count chains;
nothing waits for a real tick. Limits, priorities, pause and ordered keys are in
``integration_scheduling_controls_limits`` and ``integration_scheduling_controls_order``.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

from jobchain import Client, FailJob, JobStatus, JobTypes
from jobchain.worker import Attempt, Completed, Processors, Worker
from jobchain_conformance.suites._integration_base import (
    IntegrationEnv,
    IntegrationSuiteBase,
    Num,
    Tag,
    Total,
)

WORKERS = 3


class _Clock:
    """An injected clock every client of a case shares."""

    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


def _periodic_fleet(
    env: IntegrationEnv, clock: _Clock, *, cron: str = "* * * * *", catch_up: bool = True
) -> tuple[list[Client], list[Worker], object]:
    types = JobTypes()
    report = types.define("periodic_report", input=Tag, output=Tag, entry=True)
    clients: list[Client] = []
    workers: list[Worker] = []
    for index in range(WORKERS):
        client = Client(env.state, env.notify, types, clock=clock)
        procs = Processors()

        @procs.handler(report)
        async def run(attempt: Attempt[Tag, Tag]) -> Completed:
            return await attempt.complete(Tag(tag=attempt.input.tag))

        procs.periodic(cron, report, Tag(tag="tick"), name="every-minute", catch_up=catch_up)
        clients.append(client)
        workers.append(env.worker(client, procs, name=f"scheduler-{index}"))
    return clients, workers, report


async def _run_due_everywhere(workers: list[Worker], now: datetime) -> None:
    schedulers = [w.scheduler for w in workers]
    assert all(s is not None for s in schedulers)
    await asyncio.gather(*(s.run_due(now) for s in schedulers if s is not None))


class PeriodicScheduleTests(IntegrationSuiteBase):
    """Exactly one chain per tick whatever the number of workers; a missed tick once, no storm."""

    async def test_n_ticks_start_exactly_n_chains_across_workers(self, env: IntegrationEnv) -> None:
        start = datetime(2026, 1, 1, 0, 0, 30, tzinfo=UTC)
        clock = _Clock(start)
        clients, workers, report = _periodic_fleet(env, clock)
        client = clients[0]
        for worker in workers:
            await worker.start()
        ticks = 5
        # A new schedule starts from its first registration: 00:00, before it existed, is not
        # caught up. Then every tick is due in all three workers at once: exactly one chain
        # per tick between them.
        await _run_due_everywhere(workers, start)
        assert await env.chains_of_type(client, report) == []  # type: ignore[arg-type]
        for minute in range(1, ticks + 1):
            clock.now = start.replace(minute=minute, second=0)  # exactly at the tick
            await _run_due_everywhere(workers, clock.now)
            await _run_due_everywhere(workers, clock.now + timedelta(seconds=20))  # nothing new
        chains = await env.chains_of_type(client, report)  # type: ignore[arg-type]
        assert len(chains) == ticks
        keys = sorted(chain.root.deduplication_key or "" for chain in chains)
        assert keys == [
            f"periodic:every-minute:{start.replace(minute=m, second=0).isoformat()}"
            for m in range(1, ticks + 1)
        ]
        done = await env.await_chains(client, [chain.id for chain in chains])
        assert {chain.output["tag"] for chain in done} == {"tick"}
        records = await client.list_schedules()
        [record] = [r for r in records if r.name == "every-minute"]
        assert record.last_tick_at == start.replace(minute=ticks, second=0)
        assert record.last_chain_id in {chain.id for chain in chains}
        assert record.cron == "* * * * *"
        assert record.type_name == "periodic_report"

    async def test_ticks_missed_while_down_start_one_chain_not_a_storm(self, env: IntegrationEnv) -> None:
        start = datetime(2026, 1, 1, 0, 0, 30, tzinfo=UTC)
        clock = _Clock(start)
        clients, workers, report = _periodic_fleet(env, clock)
        for worker in workers:
            await worker.start()
        await _run_due_everywhere(workers, start)
        clock.now = start.replace(minute=1, second=0)
        await _run_due_everywhere(workers, clock.now)  # the 00:01 tick: one chain
        for worker in workers:
            await worker.stop()
        # The fleet was down for an hour: 60 ticks passed. New workers start the last only.
        clock.now = start + timedelta(hours=1, seconds=10)
        _, later, _ = _periodic_fleet(env, clock)
        for worker in later:
            await worker.start()
        await _run_due_everywhere(later, clock.now)
        await _run_due_everywhere(later, clock.now + timedelta(seconds=5))
        chains = await env.chains_of_type(clients[0], report)  # type: ignore[arg-type]
        keys = sorted(c.root.deduplication_key or "" for c in chains)
        assert len(chains) == 2, keys
        assert keys[0].endswith("T00:01:00+00:00")
        assert keys[-1].endswith("T01:00:00+00:00")

    async def test_a_new_schedule_does_not_start_the_tick_before_it_existed(
        self, env: IntegrationEnv
    ) -> None:
        # A daily 03:00 schedule first deployed at 21:54 (the default catch_up=True): the
        # 03:00 that passed before it existed is not a missed tick. Nothing starts until 03:00.
        deployed = datetime(2026, 1, 1, 21, 54, tzinfo=UTC)
        clock = _Clock(deployed)
        clients, workers, report = _periodic_fleet(env, clock, cron="0 3 * * *")
        for worker in workers:
            await worker.start()
        await _run_due_everywhere(workers, deployed)
        clock.now = deployed + timedelta(hours=5)
        await _run_due_everywhere(workers, clock.now)
        assert await env.chains_of_type(clients[0], report) == []  # type: ignore[arg-type]
        clock.now = datetime(2026, 1, 2, 3, 0, 1, tzinfo=UTC)
        await _run_due_everywhere(workers, clock.now)
        chains = await env.chains_of_type(clients[0], report)  # type: ignore[arg-type]
        assert [c.root.deduplication_key for c in chains] == [
            "periodic:every-minute:2026-01-02T03:00:00+00:00"
        ]

    async def test_without_catch_up_only_ticks_after_the_start_count(self, env: IntegrationEnv) -> None:
        start = datetime(2026, 1, 1, 0, 0, 30, tzinfo=UTC)
        clock = _Clock(start)
        clients, workers, report = _periodic_fleet(env, clock, catch_up=False)
        for worker in workers:
            await worker.start()
        await _run_due_everywhere(workers, start)
        assert await env.chains_of_type(clients[0], report) == []  # type: ignore[arg-type]
        clock.now = start + timedelta(seconds=30)
        await _run_due_everywhere(workers, clock.now)
        chains = await env.chains_of_type(clients[0], report)  # type: ignore[arg-type]
        assert len(chains) == 1


def _waiting_slice(types: JobTypes, *, atomic: bool) -> tuple[Processors, list[list[str]], object]:
    """``parent`` starts two ``child`` chains and waits for them, then sums their outputs."""
    child = types.define("child", input=Num, output=Total, entry=True)
    parent = types.define("parent", input=Num, output=Total, entry=True, max_attempts=1)
    procs = Processors()
    seen: list[list[str]] = []

    @procs.handler(child)
    async def double(attempt: Attempt[Num, Total]) -> Completed:
        if attempt.input.n < 0:
            raise FailJob("negative")
        return await attempt.complete(Total(total=attempt.input.n * 2))

    @procs.handler(parent)
    async def fan_out(attempt: Attempt[Num, Total]) -> Completed:
        if atomic:
            await attempt.prepare("atomic")
        blockers = await attempt.blockers()  # staged mode: this await selects it
        seen.append([chain.id for chain in blockers])
        if not blockers:
            n = attempt.input.n
            first = await attempt.start_chain(child, Num(n=n))
            second = await attempt.start_chain(child, Num(n=n + 1))
            return await attempt.wait_for(first, second, runs_after_failed=n < 0)
        if any(chain.status is not JobStatus.COMPLETED for chain in blockers):
            return await attempt.complete(Total(total=-1))
        return await attempt.complete(Total(total=sum(chain.output["total"] for chain in blockers)))

    return procs, seen, parent


class WaitForTests(IntegrationSuiteBase):
    """``attempt.wait_for``: the handler runs again once the chains it started ended."""

    async def _run(self, env: IntegrationEnv, *, atomic: bool) -> None:
        types = JobTypes()
        procs, seen, parent = _waiting_slice(types, atomic=atomic)
        client = env.client(types)
        async with env.worker(client, procs, concurrency=2):
            started = await env.start(client, parent, Num(n=5))  # type: ignore[arg-type]
            chain = await env.await_chain(client, started.id)
        assert chain.output == {"total": 10 + 12}
        assert len(seen) == 2
        assert seen[0] == []
        assert len(seen[1]) == 2
        job = await env.job(client, started.id)
        # Two attempts, yet max_attempts=1 held: waiting used none of the budget.
        assert job.attempt == 2
        assert job.status is JobStatus.COMPLETED
        children = [await env.chain(client, chain_id) for chain_id in seen[1]]
        assert sorted(c.output["total"] for c in children) == [10, 12]

    async def test_wait_for_in_atomic_mode(self, env: IntegrationEnv) -> None:
        await self._run(env, atomic=True)

    async def test_wait_for_in_staged_mode(self, env: IntegrationEnv) -> None:
        await self._run(env, atomic=False)

    async def test_runs_after_failed_reads_the_failed_chain(self, env: IntegrationEnv) -> None:
        types = JobTypes()
        procs, seen, parent = _waiting_slice(types, atomic=False)
        client = env.client(types)
        async with env.worker(client, procs, concurrency=2):
            # n = -1: the first child fails (FailJob), the second (n = 0) completes.
            started = await env.start(client, parent, Num(n=-1))  # type: ignore[arg-type]
            chain = await env.await_chain(client, started.id)
        assert chain.output == {"total": -1}
        statuses = sorted([(await env.chain(client, c)).status.value for c in seen[1]])
        assert statuses == ["completed", "failed"]

    async def test_a_failed_chain_fails_the_waiting_job(self, env: IntegrationEnv) -> None:
        types = JobTypes()
        child = types.define("doomed_child", input=Num, output=Total, entry=True)
        parent = types.define("strict_parent", input=Num, output=Total, entry=True)
        procs = Processors()
        runs: list[int] = []

        @procs.handler(child)
        async def doom(attempt: Attempt[Num, Total]) -> Completed:
            raise FailJob("no")

        @procs.handler(parent)
        async def wait(attempt: Attempt[Num, Total]) -> Completed:
            runs.append(attempt.job.attempt)
            started = await attempt.start_chain(child, Num(n=1))
            return await attempt.wait_for(started)

        client = env.client(types)
        async with env.worker(client, procs, concurrency=2):
            started = await env.start(client, parent, Num(n=1))
            failed = await env.wait_job(
                client, started.id, lambda j: j.status is JobStatus.FAILED, "the waiting job to fail"
            )
        assert runs == [1]
        assert failed.failed_by_chain_id is not None

    async def test_the_next_attempt_reads_declared_then_waited_blockers_in_order(
        self, env: IntegrationEnv
    ) -> None:
        types = JobTypes()
        source = types.define("source", input=Num, output=Total, entry=True)
        merge = types.define("merge", input=Num, output=Total, entry=True)
        procs = Processors()
        seen: list[list[int]] = []

        @procs.handler(source)
        async def produce(attempt: Attempt[Num, Total]) -> Completed:
            return await attempt.complete(Total(total=attempt.input.n))

        @procs.handler(merge)
        async def combine(attempt: Attempt[Num, Total]) -> Completed:
            blockers = await attempt.blockers()
            seen.append([chain.output["total"] for chain in blockers])
            if len(blockers) == 1:
                later = await attempt.start_chain(source, Num(n=2))
                return await attempt.wait_for(later, blockers[0])  # a declared one is not added twice
            return await attempt.complete(Total(total=sum(chain.output["total"] for chain in blockers)))

        client = env.client(types)
        async with env.worker(client, procs, concurrency=2):
            first = await env.start(client, source, Num(n=1))
            await env.await_chain(client, first.id)
            started = await env.start(client, merge, Num(n=0), blockers=[first])
            chain = await env.await_chain(client, started.id)
        assert seen == [[1], [1, 2]]
        assert chain.output == {"total": 3}
