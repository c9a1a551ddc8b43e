"""jobs_list(leased_by=...): the running jobs a worker holds (see ``state_queue_stats``)."""

from __future__ import annotations

from datetime import datetime, timedelta

from jobchain.contracts import JobsList, StateAdapter
from jobchain.entities import Job
from jobchain_conformance.helpers import (
    OTHER_WORKER,
    WORKER,
    attempt_error,
    complete,
    fail,
    ids,
    start,
)
from jobchain_conformance.suites.state_isolation import read
from jobchain_conformance.suites.state_lifecycle_fail import rescheduled_with
from jobchain_conformance.suites.state_queue_stats_support import (
    leased,
    running,
)

SECOND = timedelta(seconds=1)
HOUR = timedelta(hours=1)


class JobsListLeasedByTests:
    """jobs_list(leased_by=...): the running jobs those workers hold."""

    async def test_leased_by_lists_the_running_jobs_of_those_workers(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        mine = await running(state_adapter, now, type_name="a")
        theirs = await running(state_adapter, now, type_name="b", worker_id=OTHER_WORKER)
        await running(state_adapter, now, type_name="c", worker_id="worker-c")
        await start(state_adapter, now=now, type_name="a")
        assert ids(await leased(state_adapter, [WORKER])) == [mine.id]
        assert set(ids(await leased(state_adapter, [WORKER, OTHER_WORKER]))) == {mine.id, theirs.id}
        assert await leased(state_adapter, ["nobody"]) == []

    async def test_jobs_a_worker_finished_or_gave_back_are_not_listed(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        done = await running(state_adapter, now, type_name="a")
        await complete(
            state_adapter, done.id, now=now, worker_id=WORKER, lease_generation=done.lease_generation
        )
        given_back = await running(state_adapter, now, type_name="b")
        await rescheduled_with(state_adapter, given_back, attempt_error(1, at=now), now=now)
        dropped = await running(state_adapter, now, type_name="c")
        await fail(
            state_adapter, dropped.id, now=now, worker_id=WORKER, lease_generation=dropped.lease_generation
        )
        held = await running(state_adapter, now, type_name="d")
        assert ids(await leased(state_adapter, [WORKER])) == [held.id]

    async def test_a_running_job_whose_lease_expired_is_still_listed(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        job = await running(state_adapter, now - HOUR, type_name="a", lease=SECOND)
        assert ids(await leased(state_adapter, [WORKER])) == [job.id]

    async def test_leased_by_combines_with_other_filters_and_pages(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        held = [await running(state_adapter, now + index * SECOND, type_name="a") for index in range(3)]
        await running(state_adapter, now, type_name="b")
        await running(state_adapter, now + 5 * SECOND, type_name="a", worker_id=OTHER_WORKER)
        await start(state_adapter, now=now + 6 * SECOND, type_name="a")
        assert ids(await leased(state_adapter, [WORKER], type_names=["a"])) == ids(reversed(held))
        assert await leased(state_adapter, [WORKER], statuses=["completed"]) == []
        pages: list[Job] = []
        cursor: str | None = None
        while True:
            page = await read(
                state_adapter,
                lambda tx: tx.jobs_list(
                    JobsList(leased_by=[WORKER], type_names=["a"], order="asc", limit=2, cursor=cursor)
                ),
            )
            pages.extend(page.items)
            if (cursor := page.next_cursor) is None:
                break
        assert ids(pages) == ids(held)
