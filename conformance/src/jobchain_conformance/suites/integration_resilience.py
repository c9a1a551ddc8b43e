"""Resilience: every job gets done although notifications are lost or the state store fails."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta

import pytest

from jobchain import Chain, ChainStart, Client, JobStatus, JobTypes
from jobchain.contracts import Capability
from jobchain.worker import Attempt, Completed, LeaseConfig, Processors
from jobchain_conformance.suites._integration_base import IntegrationEnv, Num, Total
from jobchain_conformance.suites._integration_wrappers import (
    DroppingNotify,
    StateProxy,
    UnreachableNotify,
    as_notify,
    as_state,
)


def _workload(types: JobTypes) -> tuple[Processors, Counter[str]]:
    """Two-step chains (one step atomic, one staged) plus a fan-in over them."""
    head = types.define("head", input=Num, output=None, entry=True, continues_with=["tail"])
    tail = types.define("tail", input=Num, output=Total)
    fan_in = types.define("fan_in", input=None, output=Total, entry=True)
    procs = Processors()
    calls: Counter[str] = Counter()

    @procs.handler(head)
    async def do_head(attempt: Attempt[Num, None]) -> Completed:
        calls[attempt.job.id] += 1
        return await attempt.continue_with(tail, Num(n=attempt.input.n + 1))

    @procs.handler(tail)
    async def do_tail(attempt: Attempt[Num, Total]) -> Completed:
        calls[attempt.job.id] += 1
        await attempt.prepare("staged")
        return await attempt.complete(Total(total=attempt.input.n))

    @procs.handler(fan_in)
    async def do_fan_in(attempt: Attempt[None, Total]) -> Completed:
        calls[attempt.job.id] += 1
        chains = await attempt.blockers()
        return await attempt.complete(Total(total=sum(c.output["total"] for c in chains)))

    return procs, calls


async def _start_workload(env: IntegrationEnv, client: Client, types: JobTypes, count: int) -> list[Chain]:
    """``count`` two-step chains and one fan-in chain over all of them (last in the list)."""
    starts = [ChainStart(job_type=types.get("head"), input=Num(n=i)) for i in range(count)]
    heads = await env.start_many(client, starts)
    fan_in = await env.start(client, types.get("fan_in"), None, blockers=heads)
    return [*heads, fan_in]


def _check_done(chains: list[Chain], count: int) -> None:
    assert [c.output for c in chains[:-1]] == [{"total": i + 1} for i in range(count)]
    assert chains[-1].output == {"total": sum(i + 1 for i in range(count))}


class NotifyResilienceTests:
    """Notifications are hints: with every message lost, polling still gets everything done."""

    async def test_a_notify_adapter_that_drops_every_message_still_gets_all_jobs_done(
        self, env: IntegrationEnv
    ) -> None:
        types = JobTypes()
        procs, _ = _workload(types)
        dropping = DroppingNotify()
        client = env.client(types, notify=as_notify(dropping))
        count = 10
        async with env.worker(client, procs, concurrency=3), env.worker(client, procs, concurrency=2):
            chains = await _start_workload(env, client, types, count)
            done = await env.await_chains(client, [c.id for c in chains])
        _check_done(done, count)
        assert dropping.dropped > 0

    async def test_workers_keep_processing_while_the_notify_broker_is_down(self, env: IntegrationEnv) -> None:
        types = JobTypes()
        procs, _ = _workload(types)
        down = UnreachableNotify()
        worker_client = env.client(types, notify=as_notify(down))
        client = env.client(types)
        count = 6
        env.expect_worker_errors("listen_job_scheduled")  # the worker's subscription, retried
        async with env.worker(worker_client, procs, concurrency=3):
            chains = await _start_workload(env, worker_client, types, count)
            done = await env.await_chains(client, [c.id for c in chains])
        _check_done(done, count)
        assert down.dropped > 0

    async def test_await_chain_polls_while_the_notify_broker_is_down(self, env: IntegrationEnv) -> None:
        types = JobTypes()
        procs, _ = _workload(types)
        client = env.client(types, notify=as_notify(UnreachableNotify()))
        async with env.worker(env.client(types), procs):
            chains = await _start_workload(env, client, types, 2)
            done = await env.await_chains(client, [c.id for c in chains])
        _check_done(done, 2)


class StateResilienceTests:
    """Transient state failures are retried by the worker loop with recovery backoff."""

    async def test_transient_failures_when_the_worker_starts_are_retried(self, env: IntegrationEnv) -> None:
        types = JobTypes()
        procs, _ = _workload(types)
        client = env.client(types)
        count = 5
        chains = await _start_workload(env, client, types, count)
        flaky = StateProxy(env.state)
        flaky.fail_next(6)
        env.expect_worker_errors()  # whichever of its loops opens the failing transactions
        worker_client = env.client(types, state=as_state(flaky))
        async with env.worker(worker_client, procs):
            done = await env.await_chains(client, [c.id for c in chains])
        _check_done(done, count)
        assert flaky.failures_injected == 6

    @pytest.mark.parametrize(
        "workers",
        [
            pytest.param(1, id="one-worker"),
            pytest.param(2, id="two-workers", marks=pytest.mark.requires(Capability.CONCURRENT_TRANSACTIONS)),
        ],
    )
    async def test_transient_failures_while_processing_are_survived(
        self, env: IntegrationEnv, workers: int
    ) -> None:
        types = JobTypes()
        procs, _ = _workload(types)
        client = env.client(types)
        proxies = [StateProxy(env.state) for _ in range(workers)]
        running = [env.worker(env.client(types, state=as_state(p)), procs, concurrency=4) for p in proxies]
        count = 12
        for worker in running:
            await worker.start()
        chains = await _start_workload(env, client, types, count)
        # Fail a burst of transactions (claims, renewals, completions, reschedules) mid-flight.
        env.expect_worker_errors()  # heartbeats, reaps and claims among them
        for proxy in proxies:
            proxy.fail_next(8)
        done = await env.await_chains(client, [c.id for c in chains])
        for worker in running:
            await worker.stop()
        _check_done(done, count)
        # With wake hints an idle worker may see few transactions; the burst still landed.
        assert sum(p.failures_injected for p in proxies) >= 8

    async def test_a_failed_attempt_whose_reschedule_fails_too_is_retried_before_its_lease_ends(
        self, env: IntegrationEnv
    ) -> None:
        types = JobTypes()
        work = types.define("work", input=Num, output=Total, entry=True)
        procs = Processors()
        proxy = StateProxy(env.state)
        seen: list[int] = []

        @procs.handler(work)
        async def handle(attempt: Attempt[Num, Total]) -> Completed:
            seen.append(attempt.job.attempt)
            if attempt.job.attempt == 1:
                # The reschedule of this failure and its first retry hit a failing store.
                proxy.fail_next(2)
                raise RuntimeError("first attempt fails")
            return await attempt.complete(Total(total=attempt.input.n))

        client = env.client(types)
        started = await env.start(client, work, Num(n=5))
        env.expect_worker_errors()  # a heartbeat or reap may meet the failing store first
        # A lease far longer than the wait: only a retried reschedule can bring the job back in time.
        long_lease = LeaseConfig(duration=timedelta(minutes=10), renew_every=timedelta(minutes=5))
        async with env.worker(env.client(types, state=as_state(proxy)), procs, lease=long_lease):
            chain = await env.await_chain(client, started.id)
        assert chain.output == {"total": 5}
        assert proxy.failures_injected == 2
        assert seen == [1, 2]

    async def test_a_failing_attempt_transaction_does_not_lose_the_job(self, env: IntegrationEnv) -> None:
        types = JobTypes()
        work = types.define("work", input=Num, output=Total, entry=True)
        procs = Processors()
        proxy = StateProxy(env.state)
        seen: list[int] = []

        @procs.handler(work)
        async def handle(attempt: Attempt[Num, Total]) -> Completed:
            seen.append(attempt.job.attempt)
            await attempt.prepare("staged")
            if attempt.job.attempt == 1:
                # The completion and what follows it (a group commit's retry, or the
                # reschedule after a failed completion) both hit a dead connection.
                proxy.fail_next(2)
            return await attempt.complete(Total(total=attempt.input.n))

        client = env.client(types)
        started = await env.start(client, work, Num(n=3))
        env.expect_worker_errors()  # a heartbeat or reap may meet the failing store first
        # The suite's lease (30 s) outlasts the wait: the job must come back through the worker
        # (its completion written again, or its attempt rescheduled), never by lapsing.
        async with env.worker(env.client(types, state=as_state(proxy)), procs):
            chain = await env.await_chain(client, started.id)
        assert chain.output == {"total": 3}
        assert proxy.failures_injected == 2
        assert seen[0] == 1
        # Completed once: by the group commit written again after the outage (attempt 1),
        # or, without group commit, by a later attempt once the job was rescheduled.
        job = await env.job(client, started.id)
        assert job.status is JobStatus.COMPLETED
        assert job.attempt == seen[-1]
