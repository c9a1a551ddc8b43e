"""Blockers: fan-in, blockers already complete, nested blockers, blockers on continuations."""

from __future__ import annotations

from collections import Counter

from jobchain import Chain, JobStatus, JobTypes, Schedule
from jobchain.worker import Attempt, Completed, Processors
from jobchain_conformance.suites._integration_base import IntegrationEnv, Num, Tag, Total


def _blocker_slice(types: JobTypes) -> tuple[Processors, Counter[str]]:
    """Types ``fetch`` (entry, Num → Total n*10) and ``join`` (sums its blockers' outputs)."""
    fetch = types.define("fetch", input=Num, output=Total, entry=True)
    join = types.define("join", input=Tag, output=Total, entry=True)
    procs = Processors()
    calls: Counter[str] = Counter()

    @procs.handler(fetch)
    async def do_fetch(attempt: Attempt[Num, Total]) -> Completed:
        calls[attempt.job.id] += 1
        return await attempt.complete(Total(total=attempt.input.n * 10))

    @procs.handler(join)
    async def do_join(attempt: Attempt[Tag, Total]) -> Completed:
        calls[attempt.job.id] += 1
        blockers = await attempt.blockers()
        assert all(b.status is JobStatus.COMPLETED for b in blockers)
        return await attempt.complete(Total(total=sum(b.output["total"] for b in blockers)))

    return procs, calls


class BlockerTests:
    """A job waits ``blocked`` until every blocker chain completes, then sees their outputs."""

    async def test_fan_in_waits_for_every_blocker_and_sees_their_outputs_in_order(
        self, env: IntegrationEnv
    ) -> None:
        types = JobTypes()
        procs, _ = _blocker_slice(types)
        fetch, join = types.get("fetch"), types.get("join")
        client = env.client(types)
        # Blockers scheduled far ahead keep the join blocked until the case triggers them.
        later = Schedule.in_seconds(3600)
        first = await env.start(client, fetch, Num(n=1), schedule=later)
        second = await env.start(client, fetch, Num(n=2), schedule=later)
        joined = await env.start(client, join, Tag(tag="sum"), blockers=[first, second])
        assert joined.status is JobStatus.BLOCKED

        async with env.worker(client, procs, concurrency=2):
            await env.trigger(client, first.id)
            await env.await_chain(client, first.id)
            still = await env.chain(client, joined.id)
            assert still.status is JobStatus.BLOCKED

            await env.trigger(client, second.id)
            chain = await env.await_chain(client, joined.id)

        assert chain.output == {"total": 30}
        blockers = await client.get_job_blockers(joined.id)
        assert [b.id for b in blockers] == [first.id, second.id]
        assert [b.output for b in blockers] == [{"total": 10}, {"total": 20}]

    async def test_handler_receives_blocker_chains_with_outputs(self, env: IntegrationEnv) -> None:
        types = JobTypes()
        fetch = types.define("fetch", input=Num, output=Total, entry=True)
        report = types.define("report", input=None, output=Total, entry=True)
        procs = Processors()
        received: list[list[tuple[str, JobStatus, object]]] = []

        @procs.handler(fetch)
        async def do_fetch(attempt: Attempt[Num, Total]) -> Completed:
            return await attempt.complete(Total(total=attempt.input.n))

        @procs.handler(report)
        async def do_report(attempt: Attempt[None, Total]) -> Completed:
            chains = await attempt.blockers()
            received.append([(c.id, c.status, c.output) for c in chains])
            return await attempt.complete(Total(total=len(chains)))

        client = env.client(types)
        blockers = [await env.start(client, fetch, Num(n=n)) for n in (3, 1, 2)]
        dependent = await env.start(client, report, None, blockers=blockers)
        async with env.worker(client, procs, concurrency=3):
            await env.await_chain(client, dependent.id)

        expected = [
            (b.id, JobStatus.COMPLETED, {"total": n}) for b, n in zip(blockers, (3, 1, 2), strict=True)
        ]
        assert received == [expected]

    async def test_blockers_already_complete_leave_the_job_pending(self, env: IntegrationEnv) -> None:
        types = JobTypes()
        procs, calls = _blocker_slice(types)
        fetch, join = types.get("fetch"), types.get("join")
        client = env.client(types)
        async with env.worker(client, procs):
            first = await env.start(client, fetch, Num(n=4))
            second = await env.start(client, fetch, Num(n=5))
            await env.await_chains(client, [first.id, second.id])

            joined = await env.start(client, join, Tag(tag="late"), blockers=[first, second])
            assert joined.status is JobStatus.PENDING
            chain = await env.await_chain(client, joined.id)

        assert chain.output == {"total": 90}
        assert set(calls.values()) == {1}

    async def test_mix_of_complete_and_incomplete_blockers(self, env: IntegrationEnv) -> None:
        types = JobTypes()
        procs, _ = _blocker_slice(types)
        fetch, join = types.get("fetch"), types.get("join")
        client = env.client(types)
        async with env.worker(client, procs):
            done = await env.start(client, fetch, Num(n=1))
            await env.await_chain(client, done.id)
            waiting = await env.start(client, fetch, Num(n=2), schedule=Schedule.in_seconds(3600))
            joined = await env.start(client, join, Tag(tag="mix"), blockers=[done, waiting])
            assert joined.status is JobStatus.BLOCKED
            await env.trigger(client, waiting.id)
            chain = await env.await_chain(client, joined.id)
        assert chain.output == {"total": 30}

    async def test_nested_blockers_resolve_bottom_up(self, env: IntegrationEnv) -> None:
        types = JobTypes()
        procs, _ = _blocker_slice(types)
        fetch, join = types.get("fetch"), types.get("join")
        client = env.client(types)
        leaf = await env.start(client, fetch, Num(n=1), schedule=Schedule.in_seconds(3600))
        middle = await env.start(client, join, Tag(tag="middle"), blockers=[leaf])
        other = await env.start(client, fetch, Num(n=5))
        top = await env.start(client, join, Tag(tag="top"), blockers=[middle, other])
        assert middle.status is JobStatus.BLOCKED
        assert top.status is JobStatus.BLOCKED

        async with env.worker(client, procs, concurrency=2):
            await env.await_chain(client, other.id)
            assert (await env.chain(client, top.id)).status is JobStatus.BLOCKED
            await env.trigger(client, leaf.id)
            chain = await env.await_chain(client, top.id)

        assert (await env.chain(client, middle.id)).output == {"total": 10}
        assert chain.output == {"total": 60}

    async def test_blocker_that_continues_unblocks_only_when_its_chain_completes(
        self, env: IntegrationEnv
    ) -> None:
        types = JobTypes()
        head = types.define("head", input=Num, output=None, entry=True, continues_with=["tail"])
        tail = types.define("tail", input=Num, output=Total)
        join = types.define("join", input=None, output=Total, entry=True)
        procs = Processors()
        order: list[str] = []

        @procs.handler(head)
        async def do_head(attempt: Attempt[Num, None]) -> Completed:
            order.append("head")
            return await attempt.continue_with(tail, attempt.input, schedule=Schedule.in_seconds(3600))

        @procs.handler(tail)
        async def do_tail(attempt: Attempt[Num, Total]) -> Completed:
            order.append("tail")
            return await attempt.complete(Total(total=attempt.input.n))

        @procs.handler(join)
        async def do_join(attempt: Attempt[None, Total]) -> Completed:
            order.append("join")
            [blocker] = await attempt.blockers()
            return await attempt.complete(Total(total=blocker.output["total"] + 1))

        client = env.client(types)
        async with env.worker(client, procs):
            blocker = await env.start(client, head, Num(n=7))
            joined = await env.start(client, join, None, blockers=[blocker])

            async def continued() -> Chain | None:
                chain = await env.chain(client, blocker.id)
                return chain if chain.last.type_name == "tail" else None

            waiting = await env.wait_for(continued, "the blocker chain to continue")
            assert (await env.chain(client, joined.id)).status is JobStatus.BLOCKED
            await env.trigger(client, waiting.last.id)
            chain = await env.await_chain(client, joined.id)

        assert order == ["head", "tail", "join"]
        assert chain.output == {"total": 8}

    async def test_continuation_with_blockers_waits_for_them(self, env: IntegrationEnv) -> None:
        types = JobTypes()
        fetch = types.define("fetch", input=Num, output=Total, entry=True)
        plan = types.define("plan", input=Num, output=None, entry=True, continues_with=["gather"])
        gather = types.define("gather", input=Num, output=Total)
        procs = Processors()

        @procs.handler(fetch)
        async def do_fetch(attempt: Attempt[Num, Total]) -> Completed:
            return await attempt.complete(Total(total=attempt.input.n))

        @procs.handler(plan)
        async def do_plan(attempt: Attempt[Num, None]) -> Completed:
            await attempt.prepare("atomic")
            tx = attempt.transaction
            assert tx is not None
            fetched: list[Chain] = []
            for n in range(attempt.input.n):
                started = await client.start_chain(tx, fetch, Num(n=n + 1))
                fetched.append(started.chain)
            return await attempt.continue_with(gather, attempt.input, blockers=fetched)

        @procs.handler(gather)
        async def do_gather(attempt: Attempt[Num, Total]) -> Completed:
            chains = await attempt.blockers()
            return await attempt.complete(Total(total=sum(c.output["total"] for c in chains)))

        client = env.client(types)
        async with env.worker(client, procs, concurrency=2):
            started = await env.start(client, plan, Num(n=3))
            chain = await env.await_chain(client, started.id)

        assert chain.output == {"total": 6}
        jobs = await env.chain_jobs(client, started.id)
        assert [j.type_name for j in jobs] == ["plan", "gather"]
        blockers = await client.get_job_blockers(jobs[1].id)
        assert [b.output for b in blockers] == [{"total": 1}, {"total": 2}, {"total": 3}]

    async def test_one_chain_can_block_many_jobs(self, env: IntegrationEnv) -> None:
        types = JobTypes()
        procs, calls = _blocker_slice(types)
        fetch, join = types.get("fetch"), types.get("join")
        client = env.client(types)
        shared = await env.start(client, fetch, Num(n=1), schedule=Schedule.in_seconds(3600))
        joins = [await env.start(client, join, Tag(tag=str(i)), blockers=[shared]) for i in range(4)]
        async with env.worker(client, procs, concurrency=4):
            await env.trigger(client, shared.id)
            chains = await env.await_chains(client, [j.id for j in joins])
        assert [c.output for c in chains] == [{"total": 10}] * 4
        assert set(calls.values()) == {1}
