"""Processing modes (atomic, staged, automatic) and every error position in each of them.

An error in prepare, between the phases, in complete or after complete returned rolls back
that attempt's work (user writes, continuation, unblocking), reschedules the job, and the
retry then succeeds. Staged prepare commits by design, so its own writes survive a later
error; atomic mode keeps nothing.
"""

from __future__ import annotations

import asyncio
from typing import Any, Literal

import pytest

from jobchain import Client, JobStatus, JobType, JobTypes
from jobchain.contracts import Capability
from jobchain.transactions import Transaction
from jobchain.worker import Attempt, AttemptMisuseError, Completed, Processors
from jobchain_conformance.capabilities import requires
from jobchain_conformance.suites._base import PoisonTransaction
from jobchain_conformance.suites._integration_base import IntegrationEnv, Num, Tag, Total, recorded_error

Position = Literal["prepare", "between", "complete", "after"]
POSITIONS: list[Position] = ["prepare", "between", "complete", "after"]


class InjectedError(Exception):
    """Raised on purpose at one position of the first attempt."""


async def _side_tags(env: IntegrationEnv, client: Client, side: JobType[Any, Any]) -> set[str]:
    """Labels of the side chains the handlers wrote (the user's own work)."""
    return {c.root.input["tag"] for c in await env.chains_of_type(client, side)}


def _mark(client: Client, side: JobType[Any, Any], tag: str) -> Any:
    """A prepare/complete callback that writes a side chain labelled ``tag``."""

    async def write(tx: Transaction) -> None:
        await client.start_chain(tx, side, Tag(tag=tag))

    return write


class ProcessingModeTests:
    """Atomic keeps prepare, handler and complete in one transaction; staged commits prepare."""

    async def test_complete_before_any_other_await_selects_atomic(self, env: IntegrationEnv) -> None:
        types = JobTypes()
        quick = types.define("quick", input=None, output=Tag, entry=True)
        procs = Processors()
        modes: list[str | None] = []

        @procs.handler(quick)
        async def handle(attempt: Attempt[None, Tag]) -> Completed:
            done = await attempt.complete(Tag(tag="quick"))
            modes.append(attempt.mode)
            return done

        client = env.client(types)
        async with env.worker(client, procs):
            started = await env.start(client, quick, None)
            await env.await_chain(client, started.id)
        assert modes == ["atomic"]

    async def test_awaiting_first_selects_staged_and_prepare_is_then_refused(
        self, env: IntegrationEnv
    ) -> None:
        types = JobTypes()
        slow = types.define("slow", input=None, output=Tag, entry=True)
        procs = Processors()
        seen: list[Any] = []

        @procs.handler(slow)
        async def handle(attempt: Attempt[None, Tag]) -> Completed:
            await asyncio.sleep(0.01)
            seen.append(attempt.mode)
            seen.append(attempt.transaction)
            try:
                await attempt.prepare("atomic")
            except AttemptMisuseError as error:
                seen.append(type(error))
            return await attempt.complete(Tag(tag="slow"))

        client = env.client(types)
        async with env.worker(client, procs):
            started = await env.start(client, slow, None)
            chain = await env.await_chain(client, started.id)
        assert seen == ["staged", None, AttemptMisuseError]
        assert chain.output == {"tag": "slow"}

    async def test_sync_handlers_run_staged(self, env: IntegrationEnv) -> None:
        types = JobTypes()
        blocking = types.define("blocking", input=None, output=Tag, entry=True)
        procs = Processors()
        modes: list[str | None] = []

        @procs.handler(blocking)
        def handle(attempt: Attempt[None, Tag]) -> Tag:
            modes.append(attempt.mode)
            return Tag(tag="sync")

        client = env.client(types)
        async with env.worker(client, procs):
            started = await env.start(client, blocking, None)
            await env.await_chain(client, started.id)
        assert modes == ["staged"]

    @pytest.mark.parametrize("mode", ["atomic", "staged"])
    async def test_prepare_writes_are_visible_outside_only_as_the_mode_promises(
        self, env: IntegrationEnv, mode: Literal["atomic", "staged"]
    ) -> None:
        types = JobTypes()
        work = types.define("work", input=None, output=Tag, entry=True)
        side = types.define("side", input=Tag, output=None, entry=True)
        procs = Processors()
        client = env.client(types)
        visible: list[set[str]] = []

        @procs.handler(work)
        async def handle(attempt: Attempt[None, Tag]) -> Completed:
            await attempt.prepare(mode, _mark(client, side, "prepared"))
            # A separate reader sees committed data only.
            visible.append(await _side_tags(env, client, side))
            return await attempt.complete(Tag(tag=mode), callback=_mark(client, side, "completed"))

        async with env.worker(client, procs):
            started = await env.start(client, work, None)
            await env.await_chain(client, started.id)

        assert visible == [{"prepared"} if mode == "staged" else set()]
        assert await _side_tags(env, client, side) == {"prepared", "completed"}

    @pytest.mark.parametrize("mode", ["atomic", "staged"])
    async def test_prepare_returns_its_callbacks_result(
        self, env: IntegrationEnv, mode: Literal["atomic", "staged"]
    ) -> None:
        types = JobTypes()
        work = types.define("work", input=None, output=Tag, entry=True)
        procs = Processors()

        async def read(tx: Transaction) -> str:
            return "from prepare"

        @procs.handler(work)
        async def handle(attempt: Attempt[None, Tag]) -> Completed:
            value = await attempt.prepare(mode, read)
            inside = attempt.transaction is not None
            return await attempt.complete(Tag(tag=f"{value} {inside}"))

        client = env.client(types)
        async with env.worker(client, procs):
            started = await env.start(client, work, None)
            chain = await env.await_chain(client, started.id)
        assert chain.output == {"tag": f"from prepare {mode == 'atomic'}"}

    async def test_preparing_twice_fails_the_attempt(self, env: IntegrationEnv) -> None:
        types = JobTypes()
        work = types.define("work", input=None, output=Tag, entry=True)
        procs = Processors()

        @procs.handler(work)
        async def handle(attempt: Attempt[None, Tag]) -> Completed:
            await attempt.prepare("staged")
            if attempt.job.attempt == 1:
                await attempt.prepare("staged")
            return await attempt.complete(Tag(tag="ok"))

        client = env.client(types)
        started = await env.start(client, work, None)
        failed = await env.run_until_failed(client, procs, started.id)
        assert "AttemptMisuseError" in recorded_error(failed)
        assert (await env.retry_now(client, procs, started.id, started.id)).output == {"tag": "ok"}


class ErrorPositionTests:
    """An error at any position, in either mode, rolls back the attempt; the retry succeeds."""

    @pytest.mark.parametrize("finish", ["complete", "continue"])
    @pytest.mark.parametrize("position", POSITIONS)
    @pytest.mark.parametrize("mode", ["atomic", "staged"])
    async def test_error_rolls_back_the_attempt_and_the_retry_succeeds(
        self,
        env: IntegrationEnv,
        mode: Literal["atomic", "staged"],
        position: Position,
        finish: str,
    ) -> None:
        types = JobTypes()
        work = types.define("work", input=None, output=Total, entry=True, continues_with=["next"])
        nxt = types.define("next", input=Num, output=Total)
        dependent = types.define("dependent", input=None, output=Total, entry=True)
        side = types.define("side", input=Tag, output=None, entry=True)
        client = env.client(types)
        procs = Processors()

        @procs.handler(work)
        async def do_work(attempt: Attempt[None, Total]) -> Completed:
            n = attempt.job.attempt
            fail = n == 1

            async def prepare(tx: Transaction) -> None:
                await client.start_chain(tx, side, Tag(tag=f"prepare-{n}"))
                if fail and position == "prepare":
                    raise InjectedError(position)

            async def complete(tx: Transaction) -> None:
                await client.start_chain(tx, side, Tag(tag=f"complete-{n}"))
                if fail and position == "complete":
                    raise InjectedError(position)

            await attempt.prepare(mode, prepare)
            if fail and position == "between":
                raise InjectedError(position)
            if finish == "complete":
                done = await attempt.complete(Total(total=n), callback=complete)
            else:
                done = await attempt.continue_with(nxt, Num(n=n), callback=complete)
            if fail and position == "after":
                raise InjectedError(position)
            return done

        @procs.handler(nxt)
        async def do_next(attempt: Attempt[Num, Total]) -> Completed:
            return await attempt.complete(Total(total=attempt.input.n))

        @procs.handler(dependent)
        async def do_dependent(attempt: Attempt[None, Total]) -> Completed:
            [blocker] = await attempt.blockers()
            return await attempt.complete(Total(total=blocker.output["total"] * 100))

        chain = await env.start(client, work, None)
        waiting = await env.start(client, dependent, None, blockers=[chain])
        failed = await env.run_until_failed(client, procs, chain.id)

        # The failed attempt left nothing behind but what staged prepare committed by design.
        kept = {"prepare-1"} if mode == "staged" and position != "prepare" else set()
        assert failed.last_attempt_error is not None
        assert "InjectedError" in failed.last_attempt_error
        assert position in failed.last_attempt_error
        assert failed.output is None
        assert len(await env.chain_jobs(client, chain.id)) == 1
        assert (await env.chain(client, waiting.id)).status is JobStatus.BLOCKED
        assert await _side_tags(env, client, side) == kept

        async with env.worker(client, procs, concurrency=2):
            await env.trigger(client, chain.id)
            done = await env.await_chain(client, waiting.id)

        assert done.output == {"total": 200}
        jobs = await env.chain_jobs(client, chain.id)
        if finish == "continue":
            assert [j.type_name for j in jobs] == ["work", "next"]
            assert jobs[1].input == {"n": 2}
        else:
            assert [j.type_name for j in jobs] == ["work"]
        assert jobs[0].attempt == 2
        assert jobs[0].last_attempt_error is None
        assert await _side_tags(env, client, side) == kept | {"prepare-2", "complete-2"}

    @pytest.mark.parametrize("mode", ["atomic", "staged"])
    async def test_error_in_wrap_complete_after_the_write_rolls_back_continuation_and_unblocking(
        self, env: IntegrationEnv, mode: Literal["atomic", "staged"]
    ) -> None:
        types = JobTypes()
        work = types.define("work", input=None, output=Total, entry=True)
        dependent = types.define("dependent", input=None, output=Total, entry=True)

        class FailAfterWrite:
            async def wrap_complete(self, attempt: Attempt[Any, Any], tx: Transaction, call_next: Any) -> Any:
                result = await call_next()
                if attempt.job.attempt == 1 and attempt.job.type_name == "work":
                    raise InjectedError("wrap_complete")
                return result

        procs = Processors(middleware=[FailAfterWrite()])

        @procs.handler(work)
        async def do_work(attempt: Attempt[None, Total]) -> Completed:
            await attempt.prepare(mode)
            return await attempt.complete(Total(total=attempt.job.attempt))

        @procs.handler(dependent)
        async def do_dependent(attempt: Attempt[None, Total]) -> Completed:
            [blocker] = await attempt.blockers()
            return await attempt.complete(Total(total=blocker.output["total"]))

        client = env.client(types)
        chain = await env.start(client, work, None)
        waiting = await env.start(client, dependent, None, blockers=[chain])
        failed = await env.run_until_failed(client, procs, chain.id)
        assert failed.status is JobStatus.PENDING
        assert failed.output is None
        assert (await env.chain(client, waiting.id)).status is JobStatus.BLOCKED

        done = await env.retry_now(client, procs, chain.id, waiting.id)
        assert done.output == {"total": 2}

    @requires(Capability.POISONABLE_TRANSACTIONS)
    async def test_a_poisoned_attempt_transaction_is_rolled_back_and_rescheduled(
        self, env: IntegrationEnv, poison_transaction: PoisonTransaction | None
    ) -> None:
        if poison_transaction is None:
            pytest.skip("the adopter provides no poison_transaction hook")
        poison = poison_transaction
        types = JobTypes()
        work = types.define("work", input=None, output=Total, entry=True)
        side = types.define("side", input=Tag, output=None, entry=True)
        client = env.client(types)
        procs = Processors()

        @procs.handler(work)
        async def do_work(attempt: Attempt[None, Total]) -> Completed:
            await attempt.prepare("atomic", _mark(client, side, f"prepare-{attempt.job.attempt}"))
            if attempt.job.attempt == 1:
                tx = attempt.transaction
                assert tx is not None
                # A statement failed: every later one in this transaction fails too.
                await poison(tx.state)
            return await attempt.complete(Total(total=attempt.job.attempt))

        started = await env.start(client, work, None)
        failed = await env.run_until_failed(client, procs, started.id)
        assert failed.output is None
        assert await _side_tags(env, client, side) == set()
        done = await env.retry_now(client, procs, started.id, started.id)
        assert done.output == {"total": 2}
        assert await _side_tags(env, client, side) == {"prepare-2"}
