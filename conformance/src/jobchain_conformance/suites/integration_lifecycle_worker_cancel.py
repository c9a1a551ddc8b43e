"""Worker lifecycle cases: the worker's side of cancellation, failure downstream, retention."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from jobchain import FailJob, JobStatus, JobTypes, Retention
from jobchain.contracts import Capability, Event
from jobchain.entities import Schedule
from jobchain.worker import AbortReason, Attempt, Completed, LeaseConfig, Processors
from jobchain_conformance.capabilities import requires
from jobchain_conformance.suites._integration_base import IntegrationEnv, IntegrationSuiteBase, Num, Total

QUIET_LEASE = LeaseConfig(duration=timedelta(seconds=60), renew_every=timedelta(seconds=20))
"""A lease renewed far later than any case waits: a cancellation must arrive by notification."""


class Events:
    """An observer that keeps every event."""

    def __init__(self) -> None:
        self.events: list[Event] = []

    def on_event(self, event: Event) -> None:
        self.events.append(event)

    def named(self, name: str) -> list[Event]:
        return [event for event in self.events if event.name == name]


def _lease_for_cancel(env: IntegrationEnv) -> LeaseConfig:
    # With notifications, a lease renewed only every 20 s proves the signal came from them;
    # polling only, the next renewal is how the worker learns: one renewed every 50 ms (whose
    # 30 s still outlast the case).
    return QUIET_LEASE if env.notify is not None else env.renewing_lease


class WorkerCancelTests(IntegrationSuiteBase):
    """A cancelled running job aborts its attempt; failure flows downstream; retention prunes."""

    async def _cancel_running(self, env: IntegrationEnv, mode: str) -> None:
        types = JobTypes()
        job_type = types.define("cancellable", input=Num, output=Total, entry=True)
        procs = Processors()
        running = asyncio.Event()
        cancel_committed = asyncio.Event()
        seen: dict[str, Any] = {}

        @procs.handler(job_type)
        async def handle(attempt: Attempt[Num, Total]) -> Completed:
            await attempt.prepare(mode)  # type: ignore[arg-type]
            running.set()
            async with asyncio.timeout(min(env.wait_timeout, 10.0)):
                seen["reason"] = await attempt.signal.wait()
                await cancel_committed.wait()
            try:
                return await attempt.complete(Total(total=1))  # late: must change nothing
            except Exception as error:
                seen["late"] = error
                raise

        client = env.client(types)
        started = await env.start(client, job_type, Num(n=0))
        worker = env.worker(client, procs, lease=_lease_for_cancel(env))
        async with worker:
            await env.wait_event(running, "the handler to start")
            async with client.transaction() as tx:
                await client.cancel_chain(tx, started.id, reason="user asked")
            cancel_committed.set()

            async def attempt_over() -> bool:
                return "late" in seen and not worker.inflight_job_ids

            await env.wait_for(attempt_over, "the attempt to abort and end")

        assert seen["reason"] is AbortReason.CANCELLED
        job = await env.job(client, started.id)
        assert job.status is JobStatus.CANCELLED
        assert job.cancel_reason == "user asked"
        assert job.output is None
        assert job.completed_at is None
        assert job.leased_by is None

    async def test_cancelling_a_staged_attempt_aborts_it_with_reason_cancelled(
        self, env: IntegrationEnv
    ) -> None:
        await self._cancel_running(env, "staged")

    @requires(Capability.CONCURRENT_TRANSACTIONS)
    async def test_cancelling_an_atomic_attempt_aborts_it_with_reason_cancelled(
        self, env: IntegrationEnv
    ) -> None:
        await self._cancel_running(env, "atomic")

    async def test_dependents_fail_downstream_and_opt_in_types_run_with_blocker_statuses(
        self, env: IntegrationEnv
    ) -> None:
        types = JobTypes()
        source = types.define("source", input=Num, output=Total, entry=True)
        fine = types.define("fine", input=Num, output=Total, entry=True)
        dependent = types.define("dependent", input=Num, output=Total, entry=True)
        tolerant = types.define(
            "tolerant", input=Num, output=Total, entry=True, runs_after_failed_blockers=True
        )
        procs = Processors()
        seen_statuses: list[list[JobStatus]] = []
        dependent_calls: list[int] = []

        @procs.handler(source)
        async def do_source(attempt: Attempt[Num, Total]) -> Completed:
            raise FailJob("source is broken")

        @procs.handler(fine)
        async def do_fine(attempt: Attempt[Num, Total]) -> Completed:
            return await attempt.complete(Total(total=attempt.input.n))

        @procs.handler(dependent)
        async def do_dependent(attempt: Attempt[Num, Total]) -> Completed:
            dependent_calls.append(attempt.job.attempt)
            return await attempt.complete(Total(total=0))

        @procs.handler(tolerant)
        async def do_tolerant(attempt: Attempt[Num, Total]) -> Completed:
            blockers = await attempt.blockers()
            seen_statuses.append([chain.status for chain in blockers])
            return await attempt.complete(Total(total=len(blockers)))

        client = env.client(types)
        # The source waits (scheduled far ahead) until every dependent is in place.
        head = await env.start(client, source, Num(n=0), schedule=Schedule(after=timedelta(hours=1)))
        other = await env.start(client, fine, Num(n=7))
        direct = await env.start(client, dependent, Num(n=0), blockers=[head])
        indirect = await env.start(client, dependent, Num(n=0), blockers=[direct])
        runs_anyway = await env.start(client, tolerant, Num(n=0), blockers=[head, other])
        async with env.worker(client, procs):
            await env.trigger(client, head.id)
            chain = await env.await_chain(client, runs_anyway.id)
            failed = [
                await env.wait_job(client, c.id, lambda j: j.status is JobStatus.FAILED, f"{c.id} to fail")
                for c in (head, direct, indirect)
            ]

        assert chain.output == {"total": 2}
        assert seen_statuses == [[JobStatus.FAILED, JobStatus.COMPLETED]]
        assert dependent_calls == []
        assert failed[1].failed_by_chain_id == head.id
        assert failed[2].failed_by_chain_id == direct.id
        assert failed[1].attempt_errors[-1].error_type == "BlockerChainFailed"

    async def test_retention_prunes_old_finished_chains_by_status(self, env: IntegrationEnv) -> None:
        types = JobTypes()
        ok = types.define("ok", input=Num, output=Total, entry=True)
        bad = types.define("bad", input=Num, output=Total, entry=True)
        procs = Processors()

        @procs.handler(ok)
        async def do_ok(attempt: Attempt[Num, Total]) -> Completed:
            return await attempt.complete(Total(total=attempt.input.n))

        @procs.handler(bad)
        async def do_bad(attempt: Attempt[Num, Total]) -> Completed:
            raise FailJob("bad")

        events = Events()
        client = env.client(types, observers=[events])
        done = [await env.start(client, ok, Num(n=n)) for n in range(3)]
        dead = await env.start(client, bad, Num(n=0))
        later = await env.start(client, ok, Num(n=9), schedule=Schedule(after=timedelta(hours=1)))
        async with client.transaction() as tx:
            await client.cancel_chain(tx, later.id)
        async with env.worker(client, procs):
            await env.await_chains(client, [c.id for c in done])
            await env.wait_job(
                client, dead.id, lambda j: j.status is JobStatus.FAILED, "the bad chain to fail"
            )

        retention = Retention(
            completed=timedelta(milliseconds=1),
            cancelled=timedelta(milliseconds=1),
            interval=timedelta(milliseconds=50),
        )

        async def gone() -> bool:
            return all([await client.get_chain(c.id) is None for c in (*done, later)])

        async with env.worker(client, procs, retention=retention):
            await env.wait_for(gone, "retention to delete the completed and cancelled chains")
        remaining = await env.chain(client, dead.id)  # failed chains are kept (failed=None)
        assert remaining.status is JobStatus.FAILED
        pruned = events.named("chains_pruned")
        assert sum(event.attributes["count"] for event in pruned) == 4
        by_status: dict[str, int] = {}
        for event in pruned:
            for status, count in event.attributes["by_status"].items():
                by_status[status] = by_status.get(status, 0) + count
        assert by_status == {"completed": 3, "cancelled": 1}
