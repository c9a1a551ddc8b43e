"""Deduplication of starts, scheduling (start, continuation, timer wake-up) and triggering."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest

from jobchain import Deduplication, JobNotFoundError, JobNotTriggerableError, JobStatus, JobTypes, Schedule
from jobchain.entities import new_id
from jobchain.transactions import Transaction
from jobchain.worker import Attempt, Completed, Processors, Worker
from jobchain_conformance.suites._integration_base import IntegrationEnv, Num, Total
from jobchain_conformance.suites._integration_wrappers import StateProxy, as_state

LATER = Schedule.in_seconds(3600)
"""Far enough ahead that no case waits for it: the case triggers the job instead."""


def _counting_slice(types: JobTypes) -> tuple[Processors, Counter[str]]:
    """Type ``task`` (entry, Num → Total n) with a per-job invocation counter."""
    task = types.define("task", input=Num, output=Total, entry=True, continues_with=["task"])
    procs = Processors()
    calls: Counter[str] = Counter()

    @procs.handler(task)
    async def do_task(attempt: Attempt[Num, Total]) -> Completed:
        calls[attempt.job.id] += 1
        return await attempt.complete(Total(total=attempt.input.n))

    return procs, calls


class DeduplicationTests:
    """A start with a deduplication key returns the matching chain instead of a new one."""

    async def test_same_key_while_incomplete_returns_the_existing_chain(self, env: IntegrationEnv) -> None:
        types = JobTypes()
        procs, calls = _counting_slice(types)
        task = types.get("task")
        client = env.client(types)
        key = Deduplication(key="report-42")
        async with client.transaction() as tx:
            first = await client.start_chain(tx, task, Num(n=1), deduplication=key, schedule=LATER)
        async with client.transaction() as tx:
            again = await client.start_chain(tx, task, Num(n=2), deduplication=key)
        assert not first.deduplicated
        assert again.deduplicated
        assert again.id == first.id

        async with env.worker(client, procs):
            await env.trigger(client, first.id)
            chain = await env.await_chain(client, first.id)

        assert chain.output == {"total": 1}
        assert len(await env.chains_of_type(client, task)) == 1
        assert list(calls.values()) == [1]

    async def test_same_key_after_completion_starts_a_new_chain(self, env: IntegrationEnv) -> None:
        types = JobTypes()
        procs, calls = _counting_slice(types)
        task = types.get("task")
        client = env.client(types)
        key = Deduplication(key="nightly")
        async with env.worker(client, procs):
            first = await env.start(client, task, Num(n=1), deduplication=key)
            await env.await_chain(client, first.id)
            second = await env.start(client, task, Num(n=2), deduplication=key)
            chain = await env.await_chain(client, second.id)

        assert second.id != first.id
        assert chain.output == {"total": 2}
        assert sorted(calls.values()) == [1, 1]

    async def test_a_chain_that_continued_still_deduplicates_until_its_last_job_completes(
        self, env: IntegrationEnv
    ) -> None:
        types = JobTypes()
        head = types.define("head", input=Num, output=None, entry=True, continues_with=["tail"])
        tail = types.define("tail", input=Num, output=Total)
        procs = Processors()

        @procs.handler(head)
        async def do_head(attempt: Attempt[Num, None]) -> Completed:
            return await attempt.continue_with(tail, attempt.input, schedule=LATER)

        client = env.client(types)
        key = Deduplication(key="once")
        started = await env.start(client, head, Num(n=1), deduplication=key)
        await env.run_until_idle(client, procs)
        chain = await env.chain(client, started.id)
        assert chain.root.status is JobStatus.COMPLETED
        assert chain.status is JobStatus.PENDING

        async with client.transaction() as tx:
            again = await client.start_chain(tx, head, Num(n=2), deduplication=key)
        assert again.deduplicated
        assert again.id == started.id

    async def test_scope_any_matches_a_completed_chain_within_the_window(self, env: IntegrationEnv) -> None:
        types = JobTypes()
        procs, calls = _counting_slice(types)
        task = types.get("task")
        client = env.client(types)
        key = Deduplication(key="daily", scope="any", window=timedelta(hours=1))
        async with env.worker(client, procs):
            first = await env.start(client, task, Num(n=1), deduplication=key)
            await env.await_chain(client, first.id)
        async with client.transaction() as tx:
            again = await client.start_chain(tx, task, Num(n=2), deduplication=key)

        assert again.deduplicated
        assert again.id == first.id
        assert again.chain.status is JobStatus.COMPLETED
        assert list(calls.values()) == [1]

    async def test_keys_do_not_cross_chain_types(self, env: IntegrationEnv) -> None:
        types = JobTypes()
        one = types.define("one", input=Num, output=Total, entry=True)
        two = types.define("two", input=Num, output=Total, entry=True)
        client = env.client(types)
        key = Deduplication(key="shared")
        async with client.transaction() as tx:
            a = await client.start_chain(tx, one, Num(n=1), deduplication=key)
            b = await client.start_chain(tx, two, Num(n=1), deduplication=key)
        assert not b.deduplicated
        assert a.id != b.id

    async def test_recurring_chain_schedules_its_successor_excluding_itself(
        self, env: IntegrationEnv
    ) -> None:
        types = JobTypes()
        tick = types.define("tick", input=Num, output=Total, entry=True)
        procs = Processors()
        client = env.client(types)

        @procs.handler(tick)
        async def do_tick(attempt: Attempt[Num, Total]) -> Completed:
            n = attempt.input.n

            async def successor(tx: Transaction) -> None:
                if n >= 3:
                    return
                await client.start_chain(
                    tx,
                    tick,
                    Num(n=n + 1),
                    deduplication=Deduplication(key="tick", exclude_chain_ids=[attempt.job.chain_id]),
                )

            return await attempt.complete(Total(total=n), callback=successor)

        async with env.worker(client, procs):
            await env.start(client, tick, Num(n=1), deduplication=Deduplication(key="tick"))

            async def three_done() -> bool:
                chains = await env.chains_of_type(client, tick)
                return len(chains) == 3 and all(c.status is JobStatus.COMPLETED for c in chains)

            await env.wait_for(three_done, "three runs of the recurring chain")

        chains = await env.chains_of_type(client, tick)
        assert [c.output for c in chains] == [{"total": 1}, {"total": 2}, {"total": 3}]


class SchedulingTests:
    """Scheduled jobs wait until due; triggering makes a pending job due now."""

    async def test_future_schedule_waits_and_trigger_runs_it_now(self, env: IntegrationEnv) -> None:
        types = JobTypes()
        procs, calls = _counting_slice(types)
        task = types.get("task")
        client = env.client(types)
        scheduled = await env.start(client, task, Num(n=1), schedule=LATER)
        assert scheduled.status is JobStatus.PENDING
        assert scheduled.root.scheduled_at - scheduled.root.created_at >= timedelta(minutes=59)

        async with env.worker(client, procs):
            now = await env.start(client, task, Num(n=2))
            await env.await_chain(client, now.id)
        await env.run_until_idle(client, procs)
        waiting = await env.job(client, scheduled.id)
        assert waiting.status is JobStatus.PENDING
        assert waiting.attempt == 0
        assert scheduled.id not in calls

        async with env.worker(client, procs):
            triggered = await env.trigger(client, scheduled.id)
            assert triggered.scheduled_at <= datetime.now(UTC)
            chain = await env.await_chain(client, scheduled.id)
        assert chain.output == {"total": 1}
        assert calls[scheduled.id] == 1

    async def test_a_due_job_wakes_a_worker_whose_poll_interval_is_long(self, env: IntegrationEnv) -> None:
        types = JobTypes()
        procs, _ = _counting_slice(types)
        task = types.get("task")
        clock = env.clock()
        proxy = StateProxy(env.state)
        client = env.client(types, state=as_state(proxy), clock=clock)
        started = await env.start(client, task, Num(n=1), schedule=Schedule.in_seconds(0.3))
        # The worker must wake on its timer for the next scheduled job, not on its poll: it
        # first finds the job not yet due (the clock stands still), then the case moves the
        # clock past it, which nothing announces. Only the timer can lead to the claim.
        async with env.worker(client, procs, poll_interval=3600):

            async def looked() -> bool:
                return proxy.calls["job_next_available"] > 0

            await env.wait_for(looked, "the worker to find the job not yet due")
            assert (await env.job(client, started.id)).attempt == 0
            clock.advance(minutes=1)
            chain = await env.await_chain(client, started.id)
        job = await env.job(client, started.id)
        assert chain.output == {"total": 1}
        assert job.completed_at is not None
        assert job.completed_at >= job.scheduled_at

    async def test_a_schedule_in_the_past_is_due_at_once(self, env: IntegrationEnv) -> None:
        types = JobTypes()
        procs, _ = _counting_slice(types)
        task = types.get("task")
        client = env.client(types)
        past = Schedule(at=datetime.now(UTC) - timedelta(hours=1))
        async with env.worker(client, procs):
            started = await env.start(client, task, Num(n=1), schedule=past)
            chain = await env.await_chain(client, started.id)
        assert started.root.scheduled_at >= started.root.created_at
        assert chain.output == {"total": 1}

    async def test_scheduled_continuation_waits_until_triggered(self, env: IntegrationEnv) -> None:
        types = JobTypes()
        head = types.define("head", input=Num, output=None, entry=True, continues_with=["tail"])
        tail = types.define("tail", input=Num, output=Total)
        procs = Processors()

        @procs.handler(head)
        async def do_head(attempt: Attempt[Num, None]) -> Completed:
            return await attempt.continue_with(tail, attempt.input, schedule=LATER)

        @procs.handler(tail)
        async def do_tail(attempt: Attempt[Num, Total]) -> Completed:
            return await attempt.complete(Total(total=attempt.input.n + 1))

        client = env.client(types)
        started = await env.start(client, head, Num(n=1))
        await env.run_until_idle(client, procs)
        chain = await env.chain(client, started.id)
        assert chain.last.type_name == "tail"
        assert chain.last.status is JobStatus.PENDING
        assert chain.last.attempt == 0
        assert chain.last.scheduled_at - chain.last.created_at >= timedelta(minutes=59)

        async with env.worker(client, procs):
            await env.trigger(client, chain.last.id)
            done = await env.await_chain(client, started.id)
        assert done.output == {"total": 2}

    async def test_trigger_refuses_missing_blocked_and_completed_jobs(self, env: IntegrationEnv) -> None:
        types = JobTypes()
        procs, _ = _counting_slice(types)
        task = types.get("task")
        client = env.client(types)
        async with env.worker(client, procs):
            done = await env.start(client, task, Num(n=1))
            await env.await_chain(client, done.id)
        blocker = await env.start(client, task, Num(n=2), schedule=LATER)
        blocked = await env.start(client, task, Num(n=3), blockers=[blocker])

        with pytest.raises(JobNotFoundError):
            await env.trigger(client, new_id())
        with pytest.raises(JobNotTriggerableError) as completed:
            await env.trigger(client, done.id)
        assert completed.value.status == JobStatus.COMPLETED
        with pytest.raises(JobNotTriggerableError) as waiting:
            await env.trigger(client, blocked.id)
        assert waiting.value.status == JobStatus.BLOCKED
        # All or nothing: the pending job in a failing batch stays scheduled.
        with pytest.raises(JobNotTriggerableError):
            async with client.transaction() as tx:
                await client.trigger_jobs(tx, [blocker.id, done.id])
        assert (await env.job(client, blocker.id)).scheduled_at == blocker.root.scheduled_at


class WakeUpTests:
    """Idle workers wake when work appears: by notification, or by their poll without one.

    With a notify adapter the waiting worker polls only once an hour, so only a wake-up
    can explain the job getting done; without one it polls at the short interval. Each
    case first waits until that worker is idle (it has looked for its next job's time).
    """

    @staticmethod
    def _waiting(env: IntegrationEnv, types: JobTypes, procs: Processors) -> tuple[Worker, StateProxy]:
        proxy = StateProxy(env.state)
        poll = 3600.0 if env.notify is not None else env.poll_interval
        return env.worker(env.client(types, state=as_state(proxy)), procs, poll_interval=poll), proxy

    @staticmethod
    async def _until_idle(env: IntegrationEnv, proxy: StateProxy) -> None:
        async def idle() -> bool:
            return proxy.calls["job_next_available"] > 0

        await env.wait_for(idle, "the worker to go idle")

    async def test_a_new_job_wakes_an_idle_worker(self, env: IntegrationEnv) -> None:
        types = JobTypes()
        procs, _ = _counting_slice(types)
        client = env.client(types)
        worker, proxy = self._waiting(env, types, procs)
        async with worker:
            await self._until_idle(env, proxy)
            started = await env.start(client, types.get("task"), Num(n=1))
            chain = await env.await_chain(client, started.id)
        assert chain.output == {"total": 1}

    async def test_a_continuation_wakes_the_worker_that_handles_its_type(self, env: IntegrationEnv) -> None:
        types = JobTypes()
        head = types.define("head", input=Num, output=None, entry=True, continues_with=["tail"])
        tail = types.define("tail", input=Num, output=Total)
        heads, tails = Processors(), Processors()

        @heads.handler(head)
        async def do_head(attempt: Attempt[Num, None]) -> Completed:
            return await attempt.continue_with(tail, attempt.input)

        @tails.handler(tail)
        async def do_tail(attempt: Attempt[Num, Total]) -> Completed:
            return await attempt.complete(Total(total=attempt.input.n))

        client = env.client(types)
        waiting, proxy = self._waiting(env, types, tails)
        async with waiting:
            await self._until_idle(env, proxy)
            async with env.worker(client, heads):
                started = await env.start(client, head, Num(n=4))
                chain = await env.await_chain(client, started.id)
        assert chain.output == {"total": 4}

    async def test_unblocking_and_triggering_wake_the_waiting_worker(self, env: IntegrationEnv) -> None:
        types = JobTypes()
        gate = types.define("gate", input=None, output=Total, entry=True)
        after = types.define("after", input=None, output=Total, entry=True)
        gates, afters = Processors(), Processors()

        @gates.handler(gate)
        async def do_gate(attempt: Attempt[None, Total]) -> Completed:
            return await attempt.complete(Total(total=1))

        @afters.handler(after)
        async def do_after(attempt: Attempt[None, Total]) -> Completed:
            return await attempt.complete(Total(total=2))

        client = env.client(types)
        blocker = await env.start(client, gate, None, schedule=LATER)
        dependent = await env.start(client, after, None, blockers=[blocker])
        later = await env.start(client, after, None, schedule=LATER)
        waiting, proxy = self._waiting(env, types, afters)
        async with waiting:
            await self._until_idle(env, proxy)
            async with env.worker(client, gates):
                await env.trigger(client, blocker.id)
                await env.await_chain(client, dependent.id)
            await env.trigger(client, later.id)
            chain = await env.await_chain(client, later.id)
        assert chain.output == {"total": 2}
