"""Scheduling controls end to end: ordered keys across several workers.

Chains that share an ordering key run one at a time in start order, whatever worker
claims them: each job's handler finds the previous job of its key completed in the store.
Chains of other keys run beside them (proved with a barrier the first chains of two keys
must both reach).
"""

from __future__ import annotations

import asyncio
from collections import defaultdict

from jobchain import JobStatus, JobTypes
from jobchain.worker import Attempt, Completed, Processors
from jobchain_conformance.suites._integration_base import IntegrationEnv, IntegrationSuiteBase, Tag

WORKERS = 3


class OrderedKeyTests(IntegrationSuiteBase):
    """Per key: one chain at a time, in start order; keys in parallel."""

    async def test_interleaved_keys_run_in_start_order_per_key_and_in_parallel(
        self, env: IntegrationEnv
    ) -> None:
        types = JobTypes()
        step = types.define("ordered_step", input=Tag, output=Tag, entry=True)
        # A frozen clock: no lease or heartbeat runs out, so no job is rescued and run again.
        client = env.client(types, clock=env.clock())
        keys = ["customer-a", "customer-b", "customer-c"]
        per_key = 4
        # Per key, the order in which jobs first started (a re-run, which at-least-once
        # delivery allows, is not a new start), and every start whose predecessor in its key
        # was not completed in the store at that moment.
        first_starts: dict[str, list[int]] = defaultdict(list)
        early: list[str] = []
        chain_ids: dict[str, str] = {}
        # The first chains of two keys must run at the same time to pass this barrier.
        together = asyncio.Barrier(2)
        procs = Processors()

        @procs.handler(step)
        async def run(attempt: Attempt[Tag, Tag]) -> Completed:
            key, seq = attempt.input.tag.rsplit(":", 1)
            if int(seq) not in first_starts[key]:
                first_starts[key].append(int(seq))
            if int(seq) > 0:
                before = await env.job(client, chain_ids[f"{key}:{int(seq) - 1}"])
                if before.status is not JobStatus.COMPLETED:
                    early.append(
                        f"{attempt.input.tag} started while {key}:{int(seq) - 1} was {before.status}"
                    )
            if seq == "0" and key in keys[:2]:
                async with asyncio.timeout(env.wait_timeout):
                    await together.wait()
            await asyncio.sleep(0)  # let other attempts interleave (no timing: a yield)
            return await attempt.complete(Tag(tag=attempt.input.tag))

        chains = []
        for seq in range(per_key):
            for key in keys:
                async with client.transaction() as tx:
                    started = await client.start_chain(tx, step, Tag(tag=f"{key}:{seq}"), ordering_key=key)
                chains.append(started)
                chain_ids[f"{key}:{seq}"] = started.id
                if seq > 0:
                    assert started.ordered_after is not None
        workers = [env.worker(client, procs, concurrency=4, name=f"ordered-{i}") for i in range(WORKERS)]
        for worker in workers:
            await worker.start()
        done = await env.await_chains(client, [c.id for c in chains])
        assert all(chain.status is JobStatus.COMPLETED for chain in done)
        for key in keys:
            assert first_starts[key] == list(range(per_key)), (key, first_starts[key])
        assert early == []

    async def test_a_failed_chain_does_not_hold_its_key(self, env: IntegrationEnv) -> None:
        from jobchain import FailJob

        types = JobTypes()
        step = types.define("ordered_maybe", input=Tag, output=Tag, entry=True)
        client = env.client(types)
        ran: list[str] = []
        procs = Processors()

        @procs.handler(step)
        async def run(attempt: Attempt[Tag, Tag]) -> Completed:
            ran.append(attempt.input.tag)
            if attempt.input.tag == "first":
                raise FailJob("the first one fails")
            return await attempt.complete(Tag(tag=attempt.input.tag))

        chains = []
        for tag in ("first", "second"):
            async with client.transaction() as tx:
                chains.append(await client.start_chain(tx, step, Tag(tag=tag), ordering_key="k"))
        async with env.worker(client, procs):
            second = await env.await_chain(client, chains[1].id)
        assert second.status is JobStatus.COMPLETED
        assert ran == ["first", "second"]
        assert (await env.chain(client, chains[0].id)).status is JobStatus.FAILED
