"""Deduplication between concurrent transactions: a start waits for an open one of the same key.

The promise: while transaction T1 holds an uncommitted start of key K, a transaction T2
starting K waits until T1 ends. If T1 commits, T2 answers with T1's chain and
``deduplicated=True``; if T1 rolls back, T2 creates its own chain. An explicit id works the
same way: T2 waits, then raises DuplicateJobIdError if T1 committed that id.

Each case holds T1 open, starts T2, and checks that T2 has not finished after a grace period
(a correct backend can never finish it while T1 is open, so the grace only bounds how fast a
wrong one is caught, never whether a right one passes), then ends T1 and checks T2's answer
and the stored chains. Backends that serialize writers (one write transaction at a time) pass
by waiting for the write lock; no case makes T1 wait for T2.
"""

from __future__ import annotations

import asyncio
from contextlib import suppress
from datetime import datetime, timedelta
from typing import Literal

import pytest

from jobchain.contracts import MAX_PAGE_SIZE, JobCreated, JobsCreate, JobsList, NewJob, StateAdapter
from jobchain.entities import Deduplication, Job
from jobchain.errors import DuplicateJobIdError
from jobchain_conformance.helpers import new_job, run_and_complete, start
from jobchain_conformance.suites.state_transactions import RollbackError

GRACE = 0.5
"""Seconds T2 is given to (wrongly) finish while T1 is open."""
DEADLINE = 30.0
"""Seconds after which a case that should end is declared stuck."""

Outcome = Literal["commit", "rollback"]


def _dedup(
    key: str, scope: Literal["incomplete", "any"] = "incomplete", window: timedelta | None = None
) -> Deduplication:
    return Deduplication(key=key, scope=scope, window=window)


async def _race(
    adapter: StateAdapter, first: NewJob, second: NewJob, *, now: datetime, outcome: Outcome
) -> tuple[JobCreated, JobCreated | BaseException]:
    """T1 starts ``first`` and stays open; T2 starts ``second``; then T1 ends with ``outcome``.

    Returns T1's result and T2's (or the error T2 raised). Fails if T2 finished while T1 was open.
    """
    written, release = asyncio.Event(), asyncio.Event()
    t1_result: list[JobCreated] = []

    async def t1() -> None:
        async with adapter.transaction() as tx:
            t1_result.extend(await tx.jobs_create(JobsCreate(jobs=[first], now=now)))
            written.set()
            await release.wait()
            if outcome == "rollback":
                raise RollbackError

    async def t2() -> JobCreated:
        async with adapter.transaction() as tx:
            (created,) = await tx.jobs_create(JobsCreate(jobs=[second], now=now))
            return created

    holder = asyncio.create_task(t1())
    try:
        await asyncio.wait_for(written.wait(), DEADLINE)
        contender = asyncio.create_task(t2())
        done, _ = await asyncio.wait({contender, holder}, timeout=GRACE, return_when=asyncio.FIRST_COMPLETED)
        if contender in done:
            release.set()
            await asyncio.wait({holder}, timeout=DEADLINE)
            error = contender.exception()
            seen = repr(error) if error is not None else f"deduplicated={contender.result().deduplicated}"
            pytest.fail(
                "a start of the same key (or id) finished while another transaction held an uncommitted "
                f"start of it; it must wait for that transaction to end (it ended with {seen})"
            )
        assert not done, "the first transaction ended before it was released"
        release.set()
        with suppress(RollbackError):
            await asyncio.wait_for(holder, DEADLINE)
        try:
            answer: JobCreated | BaseException = await asyncio.wait_for(contender, DEADLINE)
        except TimeoutError:
            pytest.fail(f"the second start still waits {DEADLINE} s after the first transaction ended")
        except Exception as error:  # the case decides whether this error is the right one
            answer = error
    finally:
        release.set()
        if not holder.done():
            holder.cancel()
    return t1_result[0], answer


async def _roots_with_key(adapter: StateAdapter, key: str) -> list[Job]:
    async with adapter.transaction(read_only=True) as tx:
        page = await tx.jobs_list(JobsList(limit=MAX_PAGE_SIZE))
    return [job for job in page.items if job.chain_index == 0 and job.deduplication_key == key]


def _created(answer: JobCreated | BaseException) -> JobCreated:
    if isinstance(answer, BaseException):
        raise AssertionError(f"the second start raised {answer!r}") from answer
    return answer


class ConcurrentDeduplicationTests:
    """A deduplicating start waits for an uncommitted start of the same key, then decides."""

    @pytest.mark.parametrize(
        "dedup",
        [_dedup("k"), _dedup("k", "any", timedelta(hours=1)), _dedup("k", "incomplete", timedelta(hours=1))],
        ids=["incomplete", "any-window", "incomplete-window"],
    )
    async def test_second_start_waits_and_returns_the_first_chain_once_it_commits(
        self, state_adapter: StateAdapter, now: datetime, dedup: Deduplication
    ) -> None:
        first, second = new_job(deduplication=dedup, input=1), new_job(deduplication=dedup, input=2)
        t1, answer = await _race(state_adapter, first, second, now=now, outcome="commit")
        t2 = _created(answer)
        assert t1.deduplicated is False
        assert t2.deduplicated is True
        assert (t2.job.id, t2.job.chain_id, t2.job.input) == (first.id, first.id, 1)
        assert [job.id for job in await _roots_with_key(state_adapter, "k")] == [first.id]

    async def test_second_start_creates_its_own_chain_when_the_first_rolls_back(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        first, second = (
            new_job(deduplication=_dedup("k"), input=1),
            new_job(deduplication=_dedup("k"), input=2),
        )
        _, answer = await _race(state_adapter, first, second, now=now, outcome="rollback")
        t2 = _created(answer)
        assert t2.deduplicated is False
        assert (t2.job.id, t2.job.input) == (second.id, 2)
        assert [job.id for job in await _roots_with_key(state_adapter, "k")] == [second.id]

    async def test_second_start_of_a_key_whose_earlier_chain_completed_waits_too(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        # A committed, completed chain of the key exists: scope "incomplete" skips it, and the
        # wait must still cover the new uncommitted one (a lock on existing rows alone would not).
        done = await start(state_adapter, now=now, deduplication=_dedup("k"))
        await run_and_complete(state_adapter, done, now=now)
        first, second = (
            new_job(deduplication=_dedup("k"), input=1),
            new_job(deduplication=_dedup("k"), input=2),
        )
        _, answer = await _race(state_adapter, first, second, now=now, outcome="commit")
        t2 = _created(answer)
        assert (t2.deduplicated, t2.job.id) == (True, first.id)
        assert sorted(job.id for job in await _roots_with_key(state_adapter, "k")) == sorted(
            [done.id, first.id]
        )

    async def test_batches_sharing_keys_in_another_order_collapse_without_deadlock(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        keys = ["a", "b", "c"]
        firsts = [new_job(deduplication=_dedup(key)) for key in keys]
        seconds = [new_job(deduplication=_dedup(key)) for key in reversed(keys)]
        written, release = asyncio.Event(), asyncio.Event()

        async def t1() -> None:
            async with state_adapter.transaction() as tx:
                await tx.jobs_create(JobsCreate(jobs=firsts, now=now))
                written.set()
                await release.wait()

        async def t2() -> list[JobCreated]:
            async with state_adapter.transaction() as tx:
                return await tx.jobs_create(JobsCreate(jobs=seconds, now=now))

        holder = asyncio.create_task(t1())
        await asyncio.wait_for(written.wait(), DEADLINE)
        contender = asyncio.create_task(t2())
        done, _ = await asyncio.wait({contender}, timeout=GRACE)
        release.set()
        await asyncio.wait_for(holder, DEADLINE)
        assert not done, "a batch finished while another transaction held uncommitted starts of its keys"
        results = await asyncio.wait_for(contender, DEADLINE)
        by_key = {job.deduplication.key: job.id for job in firsts if job.deduplication is not None}
        assert [(r.deduplicated, r.job.id) for r in results] == [
            (True, by_key[key]) for key in reversed(keys)
        ]

    async def test_explicit_id_taken_by_an_uncommitted_start_raises_once_it_commits(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        first = new_job(type_name="original")
        second = new_job(id=first.id, type_name="intruder")
        _, answer = await _race(state_adapter, first, second, now=now, outcome="commit")
        assert isinstance(answer, DuplicateJobIdError), f"expected DuplicateJobIdError, got {answer!r}"
        assert answer.job_id == first.id

    async def test_explicit_id_of_a_rolled_back_start_is_free_again(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        first = new_job(type_name="original")
        second = new_job(id=first.id, type_name="second")
        _, answer = await _race(state_adapter, first, second, now=now, outcome="rollback")
        t2 = _created(answer)
        assert (t2.deduplicated, t2.job.id, t2.job.type_name) == (False, first.id, "second")
