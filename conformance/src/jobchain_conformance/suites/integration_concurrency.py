"""Concurrency: slots run attempts side by side; many workers never process a job twice."""

from __future__ import annotations

import asyncio
import threading
from collections import Counter

from jobchain import ChainStart, JobTypes
from jobchain.worker import Attempt, Completed, Processors
from jobchain_conformance.suites._integration_base import IntegrationEnv, Num, Tag, Total


class WorkerConcurrencyTests:
    """``concurrency`` slots run at once and no more; several workers share the work."""

    async def test_a_worker_runs_up_to_its_concurrency_at_once_and_never_more(
        self, env: IntegrationEnv
    ) -> None:
        types = JobTypes()
        work = types.define("work", input=Num, output=Total, entry=True)
        procs = Processors()
        running = 0
        peak = 0
        started_count = 0
        full = asyncio.Event()

        @procs.handler(work)
        async def handle(attempt: Attempt[Num, Total]) -> Completed:
            nonlocal running, peak, started_count
            running += 1
            started_count += 1
            peak = max(peak, running)
            if started_count >= 4:
                full.set()
            try:
                # The first four wait for each other: only a worker running four at once finishes.
                await env.wait_event(full, "four attempts to run at once")
                return await attempt.complete(Total(total=attempt.input.n))
            finally:
                running -= 1

        client = env.client(types)
        chains = await env.start_many(client, [ChainStart(job_type=work, input=Num(n=i)) for i in range(10)])
        async with env.worker(client, procs, concurrency=4):
            done = await env.await_chains(client, [c.id for c in chains])

        assert [c.output for c in done] == [{"total": i} for i in range(10)]
        assert peak == 4

    async def test_sync_handlers_run_in_parallel_threads(self, env: IntegrationEnv) -> None:
        types = JobTypes()
        work = types.define("work", input=Num, output=Tag, entry=True)
        procs = Processors()
        barrier = threading.Barrier(3, timeout=env.wait_timeout)

        @procs.handler(work)
        def handle(attempt: Attempt[Num, Tag]) -> Tag:
            # Only three threads running at the same time get past the barrier.
            barrier.wait()
            return Tag(tag=threading.current_thread().name)

        client = env.client(types)
        chains = await env.start_many(client, [ChainStart(job_type=work, input=Num(n=i)) for i in range(3)])
        async with env.worker(client, procs, concurrency=3):
            done = await env.await_chains(client, [c.id for c in chains])
        assert len({c.output["tag"] for c in done}) == 3

    async def test_many_workers_process_every_job_exactly_once(self, env: IntegrationEnv) -> None:
        types = JobTypes()
        head = types.define("head", input=Num, output=None, entry=True, continues_with=["tail"])
        tail = types.define("tail", input=Num, output=Total)
        fan_in = types.define("fan_in", input=None, output=Total, entry=True)
        procs = Processors()
        calls: Counter[str] = Counter()

        @procs.handler(head)
        async def do_head(attempt: Attempt[Num, None]) -> Completed:
            calls[attempt.job.id] += 1
            return await attempt.continue_with(tail, Num(n=attempt.input.n * 2))

        @procs.handler(tail)
        async def do_tail(attempt: Attempt[Num, Total]) -> Completed:
            calls[attempt.job.id] += 1
            # Half the tails run staged (an await before completing), half atomic.
            if attempt.input.n % 4 == 0:
                await asyncio.sleep(0)
            return await attempt.complete(Total(total=attempt.input.n))

        @procs.handler(fan_in)
        async def do_fan_in(attempt: Attempt[None, Total]) -> Completed:
            calls[attempt.job.id] += 1
            chains = await attempt.blockers()
            return await attempt.complete(Total(total=sum(c.output["total"] for c in chains)))

        clients = [env.client(types) for _ in range(3)]
        # The suite's lease (30 s) is far beyond any lock wait (a database may take a second to
        # detect a deadlock): this case is about concurrent claims, not lease expiry, and an
        # expired lease rightly lets another worker run the job again.
        workers = [env.worker(c, procs, concurrency=4) for c in clients]
        client = clients[0]
        count = 40
        heads = await env.start_many(
            client, [ChainStart(job_type=head, input=Num(n=i)) for i in range(count)]
        )
        total = await env.start(client, fan_in, None, blockers=heads)
        async with workers[0], workers[1], workers[2]:
            done = await env.await_chain(client, total.id)
            chains = await env.await_chains(client, [h.id for h in heads])

        assert done.output == {"total": sum(2 * i for i in range(count))}
        assert [c.output for c in chains] == [{"total": 2 * i} for i in range(count)]
        assert len(calls) == 2 * count + 1
        assert set(calls.values()) == {1}, {k: v for k, v in calls.items() if v != 1}
        ids = {w.worker_id for w in workers}
        for chain in chains:
            assert chain.last.completed_by in ids

    async def test_specialised_workers_only_take_their_own_types(self, env: IntegrationEnv) -> None:
        types = JobTypes()
        fast = types.define("fast", input=Num, output=Tag, entry=True)
        slow = types.define("slow", input=Num, output=Tag, entry=True)
        fast_procs = Processors()
        slow_procs = Processors()

        @fast_procs.handler(fast)
        async def do_fast(attempt: Attempt[Num, Tag]) -> Completed:
            return await attempt.complete(Tag(tag=attempt.worker_id))

        @slow_procs.handler(slow)
        async def do_slow(attempt: Attempt[Num, Tag]) -> Completed:
            return await attempt.complete(Tag(tag=attempt.worker_id))

        client = env.client(types)
        fast_worker = env.worker(client, fast_procs, name="fast")
        slow_worker = env.worker(client, slow_procs, name="slow")
        starts = [ChainStart(job_type=t, input=Num(n=i)) for i in range(5) for t in (fast, slow)]
        chains = await env.start_many(client, starts)
        async with fast_worker, slow_worker:
            done = await env.await_chains(client, [c.id for c in chains])
        for chain in done:
            expected = fast_worker if chain.type_name == "fast" else slow_worker
            assert chain.output == {"tag": expected.worker_id}
