"""Processing and completion of single jobs, and chains: linear, branched and loops."""

from __future__ import annotations

import threading
import uuid
from collections import Counter
from typing import Any

from jobchain import ChainStart, JobStatus, JobTypes
from jobchain.worker import Attempt, Completed, Continue, Processors
from jobchain_conformance.suites._integration_base import IntegrationEnv, Num, Tag, Total


class ProcessingTests:
    """A worker claims, runs and completes jobs; results land on the job and its chain."""

    async def test_async_handler_completes_the_job_and_its_chain(self, env: IntegrationEnv) -> None:
        types = JobTypes()
        double = types.define("double", input=Num, output=Total, entry=True)
        procs = Processors()

        @procs.handler(double)
        async def handle(attempt: Attempt[Num, Total]) -> Completed:
            return await attempt.complete(Total(total=attempt.input.n * 2))

        client = env.client(types)
        worker = env.worker(client, procs)
        async with worker:
            started = await env.start(client, double, Num(n=21))
            chain = await env.await_chain(client, started.id)

        assert chain.status is JobStatus.COMPLETED
        assert chain.output == {"total": 42}
        job = await env.job(client, started.id)
        assert job.status is JobStatus.COMPLETED
        assert job.output == {"total": 42}
        assert job.completed_by == worker.worker_id
        assert job.completed_at is not None
        assert job.attempt == 1
        assert job.last_attempt_error is None
        assert job.leased_by is None

    async def test_handler_sees_the_claimed_job_and_its_worker(self, env: IntegrationEnv) -> None:
        types = JobTypes()
        probe = types.define("probe", input=Num, output=Tag, entry=True)
        procs = Processors()
        seen: list[tuple[str, str, int, JobStatus, str | None]] = []

        @procs.handler(probe)
        async def handle(attempt: Attempt[Num, Tag]) -> Completed:
            job = attempt.job
            seen.append((job.id, attempt.worker_id, job.attempt, job.status, job.leased_by))
            return await attempt.complete(Tag(tag=attempt.worker_id))

        client = env.client(types)
        worker = env.worker(client, procs, name="probe-worker")
        async with worker:
            started = await env.start(client, probe, Num(n=1))
            chain = await env.await_chain(client, started.id)

        assert worker.worker_id.startswith("probe-worker-")
        assert seen == [(started.id, worker.worker_id, 1, JobStatus.RUNNING, worker.worker_id)]
        assert chain.output == {"tag": worker.worker_id}

    async def test_sync_handler_runs_in_a_thread_and_its_return_value_completes(
        self, env: IntegrationEnv
    ) -> None:
        types = JobTypes()
        square = types.define("square", input=Num, output=Total, entry=True)
        procs = Processors()
        threads: list[threading.Thread] = []

        @procs.handler(square)
        def handle(attempt: Attempt[Num, Total]) -> Total:
            threads.append(threading.current_thread())
            return Total(total=attempt.input.n**2)

        client = env.client(types)
        async with env.worker(client, procs):
            started = await env.start(client, square, Num(n=7))
            chain = await env.await_chain(client, started.id)

        assert chain.output == {"total": 49}
        assert len(threads) == 1
        assert threads[0] is not threading.main_thread()

    async def test_an_object_with_an_async_call_method_is_an_async_handler(self, env: IntegrationEnv) -> None:
        types = JobTypes()
        triple = types.define("triple", input=Num, output=Total, entry=True)

        class Handler:
            async def __call__(self, attempt: Attempt[Num, Total]) -> Completed:
                return await attempt.complete(Total(total=attempt.input.n * 3))

        procs = Processors()
        procs.register(triple, Handler())
        client = env.client(types)
        async with env.worker(client, procs):
            started = await env.start(client, triple, Num(n=5))
            chain = await env.await_chain(client, started.id)
        job = await env.job(client, started.id)
        assert chain.output == {"total": 15}
        assert job.attempt == 1

    async def test_sync_handler_continues_by_returning_continue(self, env: IntegrationEnv) -> None:
        types = JobTypes()
        first = types.define("first", input=Num, output=None, entry=True, continues_with=["second"])
        second = types.define("second", input=Num, output=Total)
        procs = Processors()

        @procs.handler(first)
        def handle_first(attempt: Attempt[Num, None]) -> Continue:
            return Continue(second, Num(n=attempt.input.n + 1))

        @procs.handler(second)
        def handle_second(attempt: Attempt[Num, Total]) -> Total:
            return Total(total=attempt.input.n * 10)

        client = env.client(types)
        async with env.worker(client, procs):
            started = await env.start(client, first, Num(n=1))
            chain = await env.await_chain(client, started.id)

        assert chain.output == {"total": 20}
        jobs = await env.chain_jobs(client, started.id)
        assert [j.type_name for j in jobs] == ["first", "second"]
        assert jobs[0].output is None

    async def test_jobs_started_before_the_worker_and_while_it_runs_are_all_processed(
        self, env: IntegrationEnv
    ) -> None:
        types = JobTypes()
        echo = types.define("echo", input=Num, output=Total, entry=True)
        procs = Processors()
        calls: Counter[str] = Counter()

        @procs.handler(echo)
        async def handle(attempt: Attempt[Num, Total]) -> Completed:
            calls[attempt.job.id] += 1
            return await attempt.complete(Total(total=attempt.input.n))

        client = env.client(types)
        before = await env.start_many(client, [ChainStart(job_type=echo, input=Num(n=i)) for i in range(5)])
        async with env.worker(client, procs, concurrency=3):
            after = await env.start_many(
                client, [ChainStart(job_type=echo, input=Num(n=i)) for i in range(5, 10)]
            )
            chains = await env.await_chains(client, [c.id for c in before + after])

        assert [c.output for c in chains] == [{"total": i} for i in range(10)]
        assert sorted(calls.values()) == [1] * 10

    async def test_a_batch_larger_than_the_slots_is_fully_processed(self, env: IntegrationEnv) -> None:
        types = JobTypes()
        echo = types.define("echo", input=Num, output=Total, entry=True)
        procs = Processors()
        calls: Counter[str] = Counter()

        @procs.handler(echo)
        async def handle(attempt: Attempt[Num, Total]) -> Completed:
            calls[attempt.job.id] += 1
            return await attempt.complete(Total(total=attempt.input.n))

        client = env.client(types)
        chains = await env.start_many(client, [ChainStart(job_type=echo, input=Num(n=i)) for i in range(40)])
        await env.run_until_idle(client, procs, concurrency=4)

        done = await client.list_jobs(type_names=[echo], statuses=[JobStatus.COMPLETED], limit=500)
        assert len(done.items) == 40
        assert set(calls) == {c.id for c in chains}
        assert set(calls.values()) == {1}

    async def test_a_worker_only_claims_the_types_it_has_processors_for(self, env: IntegrationEnv) -> None:
        types = JobTypes()
        mine = types.define("mine", input=Num, output=Total, entry=True)
        theirs = types.define("theirs", input=Num, output=Total, entry=True)
        procs = Processors()

        @procs.handler(mine)
        async def handle(attempt: Attempt[Num, Total]) -> Completed:
            return await attempt.complete(Total(total=attempt.input.n))

        client = env.client(types)
        other = await env.start(client, theirs, Num(n=2))
        async with env.worker(client, procs):
            own = await env.start(client, mine, Num(n=1))
            await env.await_chain(client, own.id)
        await env.run_until_idle(client, procs)

        untouched = await env.job(client, other.id)
        assert untouched.status is JobStatus.PENDING
        assert untouched.attempt == 0


class ChainTests:
    """Continuations share the chain id, count up chain_index and carry the chain type."""

    async def test_linear_chain_runs_every_step_in_order(self, env: IntegrationEnv) -> None:
        types = JobTypes()
        fetch = types.define("fetch", input=Num, output=None, entry=True, continues_with=["parse"])
        parse = types.define("parse", input=Num, output=None, continues_with=["store"])
        store = types.define("store", input=Num, output=Total)
        procs = Processors()
        order: list[str] = []

        @procs.handler(fetch)
        async def do_fetch(attempt: Attempt[Num, None]) -> Completed:
            order.append("fetch")
            return await attempt.continue_with(parse, Num(n=attempt.input.n + 1))

        @procs.handler(parse)
        async def do_parse(attempt: Attempt[Num, None]) -> Completed:
            order.append("parse")
            return await attempt.continue_with(store, Num(n=attempt.input.n * 10))

        @procs.handler(store)
        async def do_store(attempt: Attempt[Num, Total]) -> Completed:
            order.append("store")
            return await attempt.complete(Total(total=attempt.input.n + 1))

        client = env.client(types)
        async with env.worker(client, procs, concurrency=2):
            started = await env.start(client, fetch, Num(n=1))
            chain = await env.await_chain(client, started.id)

        assert order == ["fetch", "parse", "store"]
        assert chain.output == {"total": 21}
        assert chain.root.id == started.id
        jobs = await env.chain_jobs(client, started.id)
        assert [j.type_name for j in jobs] == ["fetch", "parse", "store"]
        assert [j.chain_index for j in jobs] == [0, 1, 2]
        assert {j.chain_id for j in jobs} == {started.id}
        assert {j.chain_type_name for j in jobs} == {"fetch"}
        assert [j.input for j in jobs] == [{"n": 1}, {"n": 2}, {"n": 20}]
        assert all(j.status is JobStatus.COMPLETED for j in jobs)
        assert [j.output for j in jobs] == [None, None, {"total": 21}]
        assert chain.last.id == jobs[-1].id

    async def test_branched_chain_follows_the_branch_the_handler_picks(self, env: IntegrationEnv) -> None:
        types = JobTypes()
        route = types.define("route", input=Num, output=None, entry=True, continues_with=["even", "odd"])
        even = types.define("even", input=Num, output=Tag)
        odd = types.define("odd", input=Num, output=Tag)
        procs = Processors()

        @procs.handler(route)
        async def do_route(attempt: Attempt[Num, None]) -> Completed:
            target = even if attempt.input.n % 2 == 0 else odd
            return await attempt.continue_with(target, attempt.input)

        @procs.handler(even)
        async def do_even(attempt: Attempt[Num, Tag]) -> Completed:
            return await attempt.complete(Tag(tag=f"even {attempt.input.n}"))

        @procs.handler(odd)
        async def do_odd(attempt: Attempt[Num, Tag]) -> Completed:
            return await attempt.complete(Tag(tag=f"odd {attempt.input.n}"))

        client = env.client(types)
        async with env.worker(client, procs, concurrency=2):
            two = await env.start(client, route, Num(n=2))
            three = await env.start(client, route, Num(n=3))
            chains = await env.await_chains(client, [two.id, three.id])

        assert [c.output for c in chains] == [{"tag": "even 2"}, {"tag": "odd 3"}]
        assert [j.type_name for j in await env.chain_jobs(client, two.id)] == ["route", "even"]
        assert [j.type_name for j in await env.chain_jobs(client, three.id)] == ["route", "odd"]

    async def test_loop_continues_with_its_own_type_until_done(self, env: IntegrationEnv) -> None:
        types = JobTypes()
        countdown = types.define(
            "countdown", input=Num, output=Total, entry=True, continues_with=["countdown"]
        )
        procs = Processors()

        @procs.handler(countdown)
        async def tick(attempt: Attempt[Num, Total]) -> Completed:
            if attempt.input.n > 0:
                return await attempt.continue_with(countdown, Num(n=attempt.input.n - 1))
            return await attempt.complete(Total(total=attempt.job.chain_index))

        client = env.client(types)
        async with env.worker(client, procs):
            started = await env.start(client, countdown, Num(n=4))
            chain = await env.await_chain(client, started.id)

        assert chain.output == {"total": 4}
        jobs = await env.chain_jobs(client, started.id)
        assert [j.input["n"] for j in jobs] == [4, 3, 2, 1, 0]
        assert [j.chain_index for j in jobs] == [0, 1, 2, 3, 4]
        assert {j.type_name for j in jobs} == {"countdown"}

    async def test_go_to_jumps_back_to_an_earlier_step(self, env: IntegrationEnv) -> None:
        types = JobTypes()
        check = types.define("check", input=Num, output=None, entry=True, continues_with=["work", "finish"])
        work = types.define("work", input=Num, output=None, continues_with=["check"])
        finish = types.define("finish", input=Num, output=Total)
        procs = Processors()

        @procs.handler(check)
        async def do_check(attempt: Attempt[Num, None]) -> Completed:
            target = finish if attempt.input.n >= 2 else work
            return await attempt.continue_with(target, attempt.input)

        @procs.handler(work)
        async def do_work(attempt: Attempt[Num, None]) -> Completed:
            return await attempt.continue_with(check, Num(n=attempt.input.n + 1))

        @procs.handler(finish)
        async def do_finish(attempt: Attempt[Num, Total]) -> Completed:
            return await attempt.complete(Total(total=attempt.input.n))

        client = env.client(types)
        async with env.worker(client, procs):
            started = await env.start(client, check, Num(n=0))
            chain = await env.await_chain(client, started.id)

        assert chain.output == {"total": 2}
        names = [j.type_name for j in await env.chain_jobs(client, started.id)]
        assert names == ["check", "work", "check", "work", "check", "finish"]

    async def test_chain_is_pending_while_its_next_step_waits(self, env: IntegrationEnv) -> None:
        types = JobTypes()
        head = types.define("head", input=Num, output=None, entry=True, continues_with=["tail"])
        tail = types.define("tail", input=Num, output=Total)
        procs = Processors()

        @procs.handler(head)
        async def do_head(attempt: Attempt[Num, None]) -> Completed:
            return await attempt.continue_with(tail, attempt.input)

        client = env.client(types)
        started = await env.start(client, head, Num(n=5))
        await env.run_until_idle(client, procs)

        chain = await env.chain(client, started.id)
        assert chain.status is JobStatus.PENDING
        assert chain.root.status is JobStatus.COMPLETED
        assert chain.last.type_name == "tail"
        assert chain.output is None

        tail_procs = Processors()

        @tail_procs.handler(tail)
        async def do_tail(attempt: Attempt[Num, Total]) -> Completed:
            return await attempt.complete(Total(total=attempt.input.n))

        async with env.worker(client, tail_procs):
            done = await env.await_chain(client, started.id)
        assert done.output == {"total": 5}

    async def test_continuation_takes_a_caller_id(self, env: IntegrationEnv) -> None:
        types = JobTypes()
        head = types.define("head", input=Num, output=None, entry=True, continues_with=["tail"])
        tail = types.define("tail", input=Num, output=Total)
        procs = Processors()
        chosen: dict[str, Any] = {}

        @procs.handler(head)
        async def do_head(attempt: Attempt[Num, None]) -> Completed:
            chosen["id"] = str(uuid.uuid4())
            return await attempt.continue_with(tail, attempt.input, id=chosen["id"])

        @procs.handler(tail)
        async def do_tail(attempt: Attempt[Num, Total]) -> Completed:
            return await attempt.complete(Total(total=attempt.input.n))

        client = env.client(types)
        async with env.worker(client, procs):
            started = await env.start(client, head, Num(n=5))
            chain = await env.await_chain(client, started.id)

        assert chain.last.id == chosen["id"]
        assert (await env.job(client, chosen["id"])).chain_id == started.id
