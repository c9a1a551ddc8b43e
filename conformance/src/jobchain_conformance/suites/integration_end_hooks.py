"""Failure and cancel hooks with a running worker: it registers its registry's hooks before its
first claim, and the hook jobs a failure or a cancellation starts run as any job does."""

from __future__ import annotations

import asyncio
from datetime import timedelta

from jobchain import FailJob, JobEnded, JobStatus, JobTypes
from jobchain.entities import Schedule
from jobchain.worker import Attempt, Completed, Processors
from jobchain_conformance.suites._integration_base import IntegrationEnv, IntegrationSuiteBase, Num, Total
from jobchain_conformance.suites._integration_wrappers import StateProxy, as_state


class EndHookIntegrationTests(IntegrationSuiteBase):
    """A worker's failure and a client's cancel each run the declared hook once."""

    async def test_a_failure_and_a_cancel_run_their_hooks_once_each(self, env: IntegrationEnv) -> None:
        types = JobTypes()
        failed_hook = types.define("order.failed", input=JobEnded, output=None)
        cancelled_hook = types.define("order.cancelled", input=JobEnded, output=None)
        order = types.define(
            "order",
            input=Num,
            output=Total,
            entry=True,
            on_failed=failed_hook,
            on_chain_cancelled=cancelled_hook,
        )
        procs = Processors()
        seen: list[JobEnded] = []
        first, both = asyncio.Event(), asyncio.Event()

        @procs.handler(order)
        async def do_order(attempt: Attempt[Num, Total]) -> Completed:
            if attempt.input.n == 0:
                raise FailJob("card declined")
            return await attempt.complete(Total(total=attempt.input.n))

        async def on_ended(attempt: Attempt[JobEnded, None]) -> Completed:
            seen.append(attempt.input)
            first.set()
            if len(seen) >= 2:
                both.set()
            return await attempt.complete(None)

        procs.handler(failed_hook)(on_ended)
        procs.handler(cancelled_hook)(on_ended)

        client = env.client(types)
        declined = await env.start(client, order, Num(n=0))
        later = await env.start(client, order, Num(n=1), schedule=Schedule(after=timedelta(hours=1)))
        async with env.worker(client, procs):
            # The first hook's run shows the worker registered the hooks (before its first
            # claim); a cancel committed before that would start none.
            await env.wait_event(first, "the failure hook to run")
            async with client.transaction() as tx:
                await client.cancel_chain(tx, later.id, reason="customer asked")
            await env.wait_event(both, "the cancel hook to run")
        by_event = {value.event: value for value in seen}
        assert sorted(by_event) == ["cancelled", "failed"], seen
        assert len(seen) == 2, f"a hook ran more than once: {seen}"
        failed, cancelled = by_event["failed"], by_event["cancelled"]
        assert (failed.scope, failed.job_id, failed.type_name) == ("job", declined.id, "order")
        assert failed.error is not None
        assert "card declined" in failed.error
        assert (cancelled.scope, cancelled.chain_id) == ("chain", later.id)
        assert cancelled.reason == "customer asked"
        assert (await env.job(client, declined.id)).status is JobStatus.FAILED

    async def test_a_cancel_wakes_the_workers_of_its_hook_type(self, env: IntegrationEnv) -> None:
        """With a notify adapter the worker polls once an hour: only the cancelling
        transaction's wake-up for the hook type gets the hook run."""
        types = JobTypes()
        hook = types.define("order.cancelled", input=JobEnded, output=None)
        order = types.define("order", input=Num, output=Total, entry=True, on_cancelled=hook)
        procs = Processors()
        ran = asyncio.Event()

        @procs.handler(order)
        async def do_order(attempt: Attempt[Num, Total]) -> Completed:
            return await attempt.complete(Total(total=attempt.input.n))

        @procs.handler(hook)
        async def on_cancelled(attempt: Attempt[JobEnded, None]) -> Completed:
            ran.set()
            return await attempt.complete(None)

        poll = 3600.0 if env.notify is not None else env.poll_interval
        client = env.client(types)
        later = await env.start(client, order, Num(n=1), schedule=Schedule(after=timedelta(hours=1)))
        proxy = StateProxy(env.state)
        waiting = env.worker(env.client(types, state=as_state(proxy)), procs, poll_interval=poll)
        async with waiting:

            async def idle() -> bool:
                # Its first look for the next job's time: the hooks are registered (before the
                # first claim) and the worker waits for a wake-up or its hour-long poll.
                return waiting.end_hooks_registered and proxy.calls["job_next_available"] > 0

            await env.wait_for(idle, "the worker to register its hooks and go idle")
            async with client.transaction() as tx:
                await client.cancel_chain(tx, later.id)
            await env.wait_event(ran, "the cancel hook to run")
