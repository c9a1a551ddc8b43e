"""Batch processors: many jobs per handler call, each job completed, refused or retried on its own."""

from __future__ import annotations

from collections import Counter

from jobchain import ChainStart, JobStatus, JobTypes
from jobchain.worker import Batch, Processors
from jobchain_conformance.suites._integration_base import (
    PARKED,
    IntegrationEnv,
    Num,
    Total,
    recorded_error,
)


class BatchProcessingTests:
    """``Processors.register_batch``: outputs land on the right jobs, exactly once, one by one."""

    async def test_batch_workers_complete_every_job_exactly_once_with_its_own_output(
        self, env: IntegrationEnv
    ) -> None:
        types = JobTypes()
        work = types.define("work", input=Num, output=Total, entry=True)
        procs = Processors()
        calls: Counter[str] = Counter()
        sizes: list[int] = []

        @procs.batch_handler(work, max_batch=7)
        async def handle(batch: Batch[Num, Total]) -> list[Total]:
            sizes.append(len(batch))
            for job in batch.jobs:
                calls[job.id] += 1
            return [Total(total=item.n * 3) for item in batch.inputs]

        clients = [env.client(types) for _ in range(2)]
        count = 60
        chains = await env.start_many(
            clients[0], [ChainStart(job_type=work, input=Num(n=i)) for i in range(count)]
        )
        # The suite's lease (30 s) outlasts any batch here: a job runs twice only if a claim or
        # a completion is wrong, never because a busy machine let a lease lapse.
        workers = [env.worker(c, procs, concurrency=2) for c in clients]
        async with workers[0], workers[1]:
            done = await env.await_chains(clients[0], [c.id for c in chains])

        assert [c.output for c in done] == [{"total": 3 * i} for i in range(count)]
        assert set(calls.values()) == {1}
        assert len(calls) == count
        assert max(sizes) > 1
        assert max(sizes) <= 7
        ids = {w.worker_id for w in workers}
        assert all(c.last.completed_by in ids for c in done)

    async def test_a_job_deleted_during_its_batch_is_refused_alone(self, env: IntegrationEnv) -> None:
        types = JobTypes()
        work = types.define("work", input=Num, output=Total, entry=True)
        procs = Processors()
        client = env.client(types)
        chains = await env.start_many(client, [ChainStart(job_type=work, input=Num(n=i)) for i in range(3)])
        doomed = chains[1].id

        @procs.batch_handler(work)
        async def handle(batch: Batch[Num, Total]) -> list[Total]:
            if doomed in [job.id for job in batch.jobs]:
                async with client.transaction() as tx:
                    await client.delete_chains(tx, [doomed])
            return [Total(total=item.n) for item in batch.inputs]

        async with env.worker(client, procs):
            first = await env.await_chain(client, chains[0].id)
            last = await env.await_chain(client, chains[2].id)
        assert (first.output, last.output) == ({"total": 0}, {"total": 2})
        assert await client.get_chain(doomed) is None

    async def test_an_exception_in_a_jobs_place_retries_that_job_only(self, env: IntegrationEnv) -> None:
        types = JobTypes()
        work = types.define("work", input=Num, output=Total, entry=True)
        procs = Processors()

        @procs.batch_handler(work)
        async def handle(batch: Batch[Num, Total]) -> list[Total | BaseException]:
            return [
                ValueError(f"{item.n} is odd") if item.n % 2 else Total(total=item.n) for item in batch.inputs
            ]

        client = env.client(types)
        chains = await env.start_many(client, [ChainStart(job_type=work, input=Num(n=i)) for i in range(4)])
        odd = [chains[1].id, chains[3].id]
        async with env.worker(client, procs, retry=PARKED):
            even = await env.await_chains(client, [chains[0].id, chains[2].id])
            failed = [
                await env.wait_job(
                    client, job_id, lambda j: j.status is JobStatus.PENDING and j.attempt == 1, "a retry"
                )
                for job_id in odd
            ]
        assert [c.output for c in even] == [{"total": 0}, {"total": 2}]
        assert "1 is odd" in recorded_error(failed[0])
        assert "3 is odd" in recorded_error(failed[1])
