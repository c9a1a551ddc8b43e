"""Pause and resume (``types_pause``, ``paused_types_list``): a paused type is not claimed,
``job_next_available`` leaves it out, ``queue_stats`` shows it, running jobs are untouched.

Pausing is idempotent (an already paused type keeps its ``paused_at``) and transactional
(a pause that rolls back never happened). Types need no jobs and need not be known.
"""

from __future__ import annotations

from contextlib import suppress
from datetime import datetime, timedelta

import pytest

from jobchain.contracts import StateAdapter
from jobchain.contracts.scheduling import PausedTypesList, TypesPause
from jobchain.entities import JobStatus, PausedType, Schedule
from jobchain.errors import InvalidArgumentError
from jobchain_conformance.helpers import (
    WORKER,
    acquire,
    acquire_job,
    assert_duration,
    assert_time,
    complete,
    get_job,
    ids,
    next_available,
    pause,
    paused_types,
    queue_stats,
    start,
)
from jobchain_conformance.suites.state_transactions import RollbackError

SECOND = timedelta(seconds=1)


def names(types: list[PausedType]) -> list[str]:
    return [item.type_name for item in types]


class PauseTests:
    """A paused type is claimed by no claim until it is resumed."""

    async def test_a_paused_type_is_not_claimed_and_others_are(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        await start(state_adapter, now=now, type_name="a")
        other = await start(state_adapter, now=now + SECOND, type_name="b")
        paused = await pause(state_adapter, ["a"], now=now)
        assert names(paused) == ["a"]
        assert_time(state_adapter, paused[0].paused_at, now)
        acquired = await acquire(state_adapter, now=now + 2 * SECOND, type_names=["a", "b"], limit=5)
        assert (ids(acquired.jobs), acquired.has_more) == ([other.id], False)

    async def test_a_resumed_type_is_claimed_again(self, state_adapter: StateAdapter, now: datetime) -> None:
        job = await start(state_adapter, now=now, type_name="a")
        await pause(state_adapter, ["a"], now=now)
        assert (await acquire(state_adapter, now=now + SECOND, type_names=["a"])).jobs == []
        assert await pause(state_adapter, ["a"], now=now + SECOND, paused=False) == []
        assert await paused_types(state_adapter) == []
        assert ids((await acquire(state_adapter, now=now + 2 * SECOND, type_names=["a"])).jobs) == [job.id]

    async def test_a_running_job_of_a_paused_type_is_untouched_and_completes(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        job = await start(state_adapter, now=now, type_name="a")
        running = await acquire_job(state_adapter, job, now=now)
        await pause(state_adapter, ["a"], now=now + SECOND)
        stored = await get_job(state_adapter, job.id)
        assert (stored.status, stored.leased_by, stored.lease_generation) == (
            JobStatus.RUNNING,
            WORKER,
            running.lease_generation,
        )
        done = await complete(
            state_adapter,
            job.id,
            now=now + 2 * SECOND,
            worker_id=WORKER,
            lease_generation=running.lease_generation,
        )
        assert done.job.status is JobStatus.COMPLETED

    async def test_pausing_twice_keeps_the_first_paused_at(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        await pause(state_adapter, ["a"], now=now)
        again = await pause(state_adapter, ["a", "b"], now=now + timedelta(minutes=5))
        assert names(again) == ["a", "b"]
        listed = {item.type_name: item.paused_at for item in await paused_types(state_adapter)}
        assert sorted(listed) == ["a", "b"]
        assert_time(state_adapter, listed["a"], now)
        assert_time(state_adapter, listed["b"], now + timedelta(minutes=5))

    async def test_resuming_a_type_that_is_not_paused_changes_nothing(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        await pause(state_adapter, ["a"], now=now)
        assert await pause(state_adapter, ["b"], now=now, paused=False) == []
        assert names(await paused_types(state_adapter)) == ["a"]

    async def test_the_result_lists_only_the_named_types_still_paused(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        await pause(state_adapter, ["a", "b", "c"], now=now)
        assert names(await pause(state_adapter, ["b", "c"], now=now, paused=False)) == []
        assert names(await pause(state_adapter, ["a", "d"], now=now)) == ["a", "d"]

    async def test_paused_types_are_listed_by_name(self, state_adapter: StateAdapter, now: datetime) -> None:
        await pause(state_adapter, ["zeta", "Alpha", "beta"], now=now)
        assert names(await paused_types(state_adapter)) == ["Alpha", "beta", "zeta"]

    async def test_a_pause_that_rolls_back_never_happened(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        job = await start(state_adapter, now=now, type_name="a")
        with suppress(RollbackError):
            async with state_adapter.transaction() as tx:
                await tx.types_pause(TypesPause(type_names=["a"], now=now))
                assert names(await tx.paused_types_list(PausedTypesList())) == ["a"]
                raise RollbackError
        assert await paused_types(state_adapter) == []
        assert ids((await acquire(state_adapter, now=now + SECOND, type_names=["a"])).jobs) == [job.id]

    def test_type_names_must_be_a_list(self) -> None:
        with pytest.raises(InvalidArgumentError):
            TypesPause(type_names="a")


class PausedVisibilityTests:
    """job_next_available leaves paused types out; queue_stats marks them."""

    async def test_next_available_leaves_a_paused_type_out(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        await start(state_adapter, now=now, type_name="a")
        await start(state_adapter, now=now, type_name="b", schedule=Schedule(at=now + 10 * SECOND))
        await pause(state_adapter, ["a"], now=now)
        assert await next_available(state_adapter, now=now, type_names=["a"]) is None
        assert_duration(
            state_adapter, await next_available(state_adapter, now=now, type_names=["a", "b"]), 10 * SECOND
        )
        await pause(state_adapter, ["a"], now=now, paused=False)
        assert await next_available(state_adapter, now=now, type_names=["a", "b"]) == timedelta(0)

    async def test_queue_stats_marks_a_paused_type_and_lists_it_without_jobs(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        await start(state_adapter, now=now, type_name="busy")
        await start(state_adapter, now=now, type_name="free")
        await pause(state_adapter, ["busy", "idle"], now=now)
        stats = await queue_stats(state_adapter, now=now)
        assert [(item.type_name, item.paused) for item in stats.types] == [
            ("busy", True),
            ("free", False),
            ("idle", True),
        ]
        assert (stats.get("busy").pending, stats.get("idle").total) == (1, 0)
        named = await queue_stats(state_adapter, now=now, type_names=["idle", "free"])
        assert [(item.type_name, item.paused) for item in named.types] == [("free", False), ("idle", True)]

    async def test_a_resumed_type_without_jobs_leaves_queue_stats(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        await start(state_adapter, now=now, type_name="busy")
        await pause(state_adapter, ["busy", "idle"], now=now)
        await pause(state_adapter, ["busy", "idle"], now=now, paused=False)
        stats = await queue_stats(state_adapter, now=now)
        assert [(item.type_name, item.paused) for item in stats.types] == [("busy", False)]
