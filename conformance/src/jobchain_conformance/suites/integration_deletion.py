"""Deletion with cascade (also of a running job) and workerless completion (also of a running job)."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pytest

from jobchain import (
    BlockerReferenceError,
    ChainNotFoundError,
    Completion,
    JobAlreadyCompletedError,
    JobchainError,
    JobStatus,
    JobTypeMismatchError,
    JobTypes,
    Schedule,
)
from jobchain.entities import new_id
from jobchain.worker import AbortReason, Attempt, Completed, Processors
from jobchain_conformance.suites._integration_base import IntegrationEnv, Num, Tag, Total

LATER = Schedule.in_seconds(3600)


class _Stalling:
    """A staged handler that reports it is running, then waits for its abort signal or a go."""

    def __init__(self, env: IntegrationEnv, *, until_signal: bool) -> None:
        self.env = env
        self.until_signal = until_signal
        self.running = asyncio.Event()
        self.go = asyncio.Event()
        self.finished = asyncio.Event()
        self.reasons: list[AbortReason | None] = []
        self.late: list[BaseException] = []

    async def __call__(self, attempt: Attempt[Num, Total]) -> Completed:
        await attempt.prepare("staged")
        self.running.set()
        try:
            async with asyncio.timeout(self.env.wait_timeout):
                if self.until_signal:
                    await attempt.signal.wait()
                else:
                    await self.go.wait()
        except TimeoutError:
            pass
        self.reasons.append(attempt.signal.reason)
        try:
            return await attempt.complete(Total(total=-1))
        except BaseException as error:
            self.late.append(error)
            raise
        finally:
            self.finished.set()


class DeletionTests:
    """Deleting chains removes every job; blockers are protected unless the delete cascades."""

    async def test_cascade_deletes_blocker_chains_recursively_and_nothing_runs(
        self, env: IntegrationEnv
    ) -> None:
        types = JobTypes()
        task = types.define("task", input=Num, output=Total, entry=True)
        procs = Processors()
        calls: Counter[str] = Counter()

        @procs.handler(task)
        async def do_task(attempt: Attempt[Num, Total]) -> Completed:
            calls[attempt.job.id] += 1
            return await attempt.complete(Total(total=attempt.input.n))

        client = env.client(types)
        leaf = await env.start(client, task, Num(n=1), schedule=LATER)
        middle = await env.start(client, task, Num(n=2), blockers=[leaf])
        top = await env.start(client, task, Num(n=3), blockers=[middle])
        bystander = await env.start(client, task, Num(n=4), schedule=LATER)

        with pytest.raises(BlockerReferenceError) as refused:
            async with client.transaction() as tx:
                await client.delete_chains(tx, [leaf.id])
        assert [(r.chain_id, r.referenced_by_job_id) for r in refused.value.references] == [
            (leaf.id, middle.id)
        ]
        assert (await client.get_chain(leaf.id)) is not None

        async with client.transaction() as tx:
            deleted = await client.delete_chains(tx, [top.id], cascade=True)
        assert {c.id for c in deleted} == {leaf.id, middle.id, top.id}
        for chain_id in (leaf.id, middle.id, top.id):
            assert await client.get_chain(chain_id) is None
            assert await client.get_job(chain_id) is None
        assert (await env.chain(client, bystander.id)).status is JobStatus.PENDING

        await env.run_until_idle(client, procs)
        assert calls == Counter()

    async def test_deleting_a_chain_removes_its_continuations(self, env: IntegrationEnv) -> None:
        types = JobTypes()
        head = types.define("head", input=Num, output=None, entry=True, continues_with=["tail"])
        tail = types.define("tail", input=Num, output=Total)
        procs = Processors()

        @procs.handler(head)
        async def do_head(attempt: Attempt[Num, None]) -> Completed:
            return await attempt.continue_with(tail, attempt.input)

        @procs.handler(tail)
        async def do_tail(attempt: Attempt[Num, Total]) -> Completed:
            return await attempt.complete(Total(total=attempt.input.n))

        client = env.client(types)
        async with env.worker(client, procs):
            started = await env.start(client, head, Num(n=1))
            await env.await_chain(client, started.id)
        jobs = await env.chain_jobs(client, started.id)
        assert len(jobs) == 2

        async with client.transaction() as tx:
            deleted = await client.delete_chain(tx, started.id)
        assert deleted is not None
        assert deleted.id == started.id
        for job in jobs:
            assert await client.get_job(job.id) is None
        async with client.transaction() as tx:
            assert await client.delete_chain(tx, started.id) is None

    async def test_cascade_follows_blockers_of_continuations(self, env: IntegrationEnv) -> None:
        types = JobTypes()
        head = types.define("head", input=Num, output=None, entry=True, continues_with=["tail"])
        tail = types.define("tail", input=Num, output=Total)
        dep = types.define("dep", input=Num, output=Total, entry=True)
        procs = Processors()
        client = env.client(types)
        blocker_ids: list[str] = []

        @procs.handler(head)
        async def do_head(attempt: Attempt[Num, None]) -> Completed:
            await attempt.prepare("atomic")
            tx = attempt.transaction
            assert tx is not None
            blocker = await client.start_chain(tx, dep, Num(n=9), schedule=LATER)
            blocker_ids.append(blocker.id)
            return await attempt.continue_with(tail, attempt.input, blockers=[blocker.chain])

        started = await env.start(client, head, Num(n=1))
        await env.run_until_idle(client, procs)
        chain = await env.chain(client, started.id)
        assert chain.last.status is JobStatus.BLOCKED

        async with client.transaction() as tx:
            deleted = await client.delete_chains(tx, [started.id], cascade=True)
        assert {c.id for c in deleted} == {started.id, *blocker_ids}
        assert await client.get_chain(blocker_ids[0]) is None

    async def test_a_running_staged_job_whose_chain_is_deleted_aborts_with_not_found(
        self, env: IntegrationEnv
    ) -> None:
        types = JobTypes()
        slow = types.define("slow", input=Num, output=Total, entry=True)
        after = types.define("after", input=Num, output=Total, entry=True)
        stalling = _Stalling(env, until_signal=True)
        procs = Processors()
        procs.register(slow, stalling)

        @procs.handler(after)
        async def do_after(attempt: Attempt[Num, Total]) -> Completed:
            return await attempt.complete(Total(total=attempt.input.n))

        client = env.client(types)
        # Renewed every 50 ms: a pair without notifications learns of the deletion at the next
        # renewal, soon; with notifications the worker hears of it at once.
        async with env.worker(client, procs, concurrency=2, lease=env.renewing_lease):
            started = await env.start(client, slow, Num(n=1))
            await env.wait_event(stalling.running, "the staged handler to start")
            async with client.transaction() as tx:
                await client.delete_chain(tx, started.id)
            await env.wait_event(stalling.finished, "the handler to see its abort signal")
            # The worker carries on with other work.
            other = await env.start(client, after, Num(n=2))
            assert (await env.await_chain(client, other.id)).output == {"total": 2}

        assert stalling.reasons == [AbortReason.NOT_FOUND]
        assert len(stalling.late) == 1
        assert isinstance(stalling.late[0], JobchainError)
        assert await client.get_job(started.id) is None
        assert await client.get_chain(started.id) is None


async def _complete_with(completion: Completion[Any, Any], output: Any) -> None:
    await completion.complete(output)


class WorkerlessCompletionTests:
    """``complete_chain`` finishes a chain's current job without a worker, in the caller's tx."""

    async def test_completes_a_pending_chain_and_the_worker_never_runs_it(self, env: IntegrationEnv) -> None:
        types = JobTypes()
        approval = types.define("approval", input=Num, output=Tag, entry=True)
        procs = Processors()
        calls: list[str] = []

        @procs.handler(approval)
        async def do_approval(attempt: Attempt[Num, Tag]) -> Completed:
            calls.append(attempt.job.id)
            return await attempt.complete(Tag(tag="by worker"))

        client = env.client(types)
        started = await env.start(client, approval, Num(n=1), schedule=LATER)
        async with client.transaction() as tx:
            chain = await client.complete_chain(
                tx, approval, started.id, lambda c: _complete_with(c, Tag(tag="by hand"))
            )
        assert chain.status is JobStatus.COMPLETED
        assert chain.output == {"tag": "by hand"}
        assert chain.last.completed_by is None

        await env.run_until_idle(client, procs)
        assert calls == []
        assert (await env.await_chain(client, started.id)).output == {"tag": "by hand"}

    async def test_workerless_continuation_is_processed_by_the_worker(self, env: IntegrationEnv) -> None:
        types = JobTypes()
        wait = types.define("wait", input=Num, output=None, entry=True, continues_with=["ship"])
        ship = types.define("ship", input=Num, output=Total)
        procs = Processors()

        @procs.handler(ship)
        async def do_ship(attempt: Attempt[Num, Total]) -> Completed:
            return await attempt.complete(Total(total=attempt.input.n * 2))

        client = env.client(types)

        async def approve(completion: Completion[Num, None]) -> None:
            await completion.continue_with(ship, Num(n=completion.input.n + 1))

        async with env.worker(client, procs):
            started = await env.start(client, wait, Num(n=4))
            async with client.transaction() as tx:
                await client.complete_chain(tx, wait, started.id, approve)
            chain = await env.await_chain(client, started.id)

        assert chain.output == {"total": 10}
        jobs = await env.chain_jobs(client, started.id)
        assert [j.type_name for j in jobs] == ["wait", "ship"]
        assert jobs[0].completed_by is None

    async def test_workerless_completion_unblocks_dependents(self, env: IntegrationEnv) -> None:
        types = JobTypes()
        gate = types.define("gate", input=None, output=Tag, entry=True)
        after = types.define("after", input=None, output=Tag, entry=True)
        procs = Processors()

        @procs.handler(after)
        async def do_after(attempt: Attempt[None, Tag]) -> Completed:
            [blocker] = await attempt.blockers()
            return await attempt.complete(Tag(tag="after " + blocker.output["tag"]))

        client = env.client(types)
        async with env.worker(client, procs):
            blocker = await env.start(client, gate, None)
            dependent = await env.start(client, after, None, blockers=[blocker])
            assert dependent.status is JobStatus.BLOCKED
            async with client.transaction() as tx:
                await client.complete_chain(
                    tx, gate, blocker.id, lambda c: _complete_with(c, Tag(tag="open"))
                )
            chain = await env.await_chain(client, dependent.id)
        assert chain.output == {"tag": "after open"}

    async def test_a_read_only_callback_leaves_the_job_to_the_worker(self, env: IntegrationEnv) -> None:
        types = JobTypes()
        task = types.define("task", input=Num, output=Total, entry=True)
        procs = Processors()

        @procs.handler(task)
        async def do_task(attempt: Attempt[Num, Total]) -> Completed:
            return await attempt.complete(Total(total=attempt.input.n))

        client = env.client(types)
        started = await env.start(client, task, Num(n=3))
        looked: list[int] = []

        async def look(completion: Completion[Num, Total]) -> None:
            looked.append(completion.input.n)

        async with client.transaction() as tx:
            chain = await client.complete_chain(tx, task, started.id, look)
        assert looked == [3]
        assert chain.status is JobStatus.PENDING
        async with env.worker(client, procs):
            done = await env.await_chain(client, started.id)
        assert done.output == {"total": 3}
        assert done.last.completed_by is not None

    async def test_refusals_missing_chain_wrong_type_and_already_completed(self, env: IntegrationEnv) -> None:
        types = JobTypes()
        task = types.define("task", input=Num, output=Total, entry=True)
        other = types.define("other", input=Num, output=Total, entry=True)
        client = env.client(types)
        started = await env.start(client, task, Num(n=1))

        def done(c: Completion[Any, Any]) -> Any:
            return _complete_with(c, Total(total=1))

        with pytest.raises(ChainNotFoundError):
            async with client.transaction() as tx:
                await client.complete_chain(tx, task, new_id(), done)
        with pytest.raises(JobTypeMismatchError):
            async with client.transaction() as tx:
                await client.complete_chain(tx, other, started.id, done)
        async with client.transaction() as tx:
            await client.complete_chain(tx, task, started.id, done)
        with pytest.raises(JobAlreadyCompletedError):
            async with client.transaction() as tx:
                await client.complete_chain(tx, task, started.id, done)
        assert (await env.chain(client, started.id)).output == {"total": 1}

    @pytest.mark.parametrize(
        "waits_for_signal", [True, False], ids=["handler-waits-for-signal", "handler-ignores-signal"]
    )
    async def test_completing_a_running_staged_job_aborts_the_worker_and_its_late_complete_changes_nothing(
        self, env: IntegrationEnv, waits_for_signal: bool
    ) -> None:
        types = JobTypes()
        slow = types.define("slow", input=Num, output=Total, entry=True)
        stalling = _Stalling(env, until_signal=waits_for_signal)
        procs = Processors()
        procs.register(slow, stalling)
        client = env.client(types)

        # Renewed every 50 ms: without notifications the worker learns of the completion at
        # its next renewal, soon.
        async with env.worker(client, procs, lease=env.renewing_lease):
            started = await env.start(client, slow, Num(n=1))
            await env.wait_event(stalling.running, "the staged handler to start")
            async with client.transaction() as tx:
                await client.complete_chain(tx, slow, started.id, lambda c: _complete_with(c, Total(total=7)))
            stalling.go.set()
            await env.wait_event(stalling.finished, "the handler's late completion")

        if waits_for_signal:
            assert stalling.reasons == [AbortReason.ALREADY_COMPLETED]
        assert len(stalling.late) == 1
        assert isinstance(stalling.late[0], JobchainError)
        job = await env.job(client, started.id)
        assert job.status is JobStatus.COMPLETED
        assert job.output == {"total": 7}
        assert job.completed_by is None
        assert job.attempt == 1
        assert len(await env.chain_jobs(client, started.id)) == 1
