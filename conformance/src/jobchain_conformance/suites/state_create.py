"""jobs_create: chain ids, stored fields, schedules, batches, ids, deduplication."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Literal

import pytest

from jobchain.contracts import JobCreated, JobsCreate, StateAdapter, StateTx
from jobchain.entities import Deduplication, JobStatus, JsonValue, Schedule, new_id
from jobchain.errors import DuplicateJobIdError
from jobchain_conformance.helpers import (
    assert_time,
    blockers_of,
    complete,
    continuation_of,
    continue_chain,
    create,
    create_one,
    find_job,
    get_chain,
    get_job,
    new_job,
    refused,
    start,
)

NESTED_JSON: JsonValue = {
    "text": "zürich — 東京",
    "int": 42,
    "float": 1.5,
    "bool": True,
    "null": None,
    "list": [1, "two", {"three": [3.0, False]}],
    "nested": {"a": {"b": {"c": []}}},
}


class JobsCreateTests:
    """Creating root jobs and continuations, one at a time and in batches."""

    async def test_job_without_chain_id_starts_a_chain_whose_id_is_its_own(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        job_id = new_id()
        created = await create_one(state_adapter, new_job(id=job_id), now=now)
        assert created.deduplicated is False
        assert created.job.id == job_id
        assert created.job.chain_id == job_id
        assert created.job.chain_index == 0
        assert created.job.status is JobStatus.PENDING

    async def test_created_job_reads_back_with_the_fields_it_was_given(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        job = await start(state_adapter, now=now, type_name="send", chain_type_name="signup", input={"n": 1})
        stored = await get_job(state_adapter, job.id)
        assert stored == job
        assert (stored.type_name, stored.chain_type_name, stored.input) == ("send", "signup", {"n": 1})
        assert (stored.attempt, stored.lease_generation, stored.output) == (0, 0, None)
        assert (stored.leased_by, stored.leased_until, stored.completed_at) == (None, None, None)
        assert (stored.last_attempt_at, stored.last_attempt_error) == (None, None)

    async def test_continuation_keeps_its_chain_id_and_index(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        root = await start(state_adapter, now=now, type_name="a", chain_type_name="flow")
        step = await continue_chain(state_adapter, root, now=now, type_name="b")
        assert step.id != root.id
        assert (step.chain_id, step.chain_index) == (root.id, 1)
        assert (step.type_name, step.chain_type_name) == ("b", "flow")
        assert not step.is_root
        assert await get_job(state_adapter, step.id) == step

    async def test_continuations_take_sequential_chain_indexes(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        root = await start(state_adapter, now=now)
        first = await continue_chain(state_adapter, root, now=now)
        second = await continue_chain(state_adapter, first, now=now)
        assert [root.chain_index, first.chain_index, second.chain_index] == [0, 1, 2]
        assert (await get_chain(state_adapter, root.id)).last.id == second.id

    async def test_null_input_is_stored_as_null(self, state_adapter: StateAdapter, now: datetime) -> None:
        job = await start(state_adapter, now=now, input=None)
        assert (await get_job(state_adapter, job.id)).input is None

    @pytest.mark.parametrize(
        "value",
        [NESTED_JSON, [1, [2, [3]], {"k": None}], "plain text", 0, -7.25, False],
        ids=["object", "array", "string", "zero", "float", "false"],
    )
    async def test_json_input_round_trips_unchanged(
        self, state_adapter: StateAdapter, now: datetime, value: JsonValue
    ) -> None:
        job = await start(state_adapter, now=now, input=value)
        assert job.input == value
        assert (await get_job(state_adapter, job.id)).input == value

    async def test_json_output_round_trips_unchanged(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        job = await start(state_adapter, now=now)
        await complete(state_adapter, job.id, now=now, output=NESTED_JSON)
        assert (await get_job(state_adapter, job.id)).output == NESTED_JSON

    async def test_created_at_and_scheduled_at_are_now_without_a_schedule(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        job = await start(state_adapter, now=now)
        stored = await get_job(state_adapter, job.id)
        assert_time(state_adapter, stored.created_at, now)
        assert_time(state_adapter, stored.scheduled_at, now)
        assert stored.created_at.utcoffset() == timedelta(0)

    async def test_schedule_after_delays_scheduled_at(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        job = await start(state_adapter, now=now, schedule=Schedule(after=timedelta(minutes=5)))
        stored = await get_job(state_adapter, job.id)
        assert_time(state_adapter, stored.scheduled_at, now + timedelta(minutes=5))
        assert_time(state_adapter, stored.created_at, now)

    async def test_schedule_at_a_future_time_is_kept(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        at = now + timedelta(hours=2, seconds=3)
        job = await start(state_adapter, now=now, schedule=Schedule(at=at))
        assert_time(state_adapter, (await get_job(state_adapter, job.id)).scheduled_at, at)

    async def test_past_schedule_at_is_clamped_to_now(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        job = await start(state_adapter, now=now, schedule=Schedule(at=now - timedelta(days=3)))
        assert_time(state_adapter, (await get_job(state_adapter, job.id)).scheduled_at, now)

    async def test_trace_contexts_round_trip(self, state_adapter: StateAdapter, now: datetime) -> None:
        trace = {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
        chain_trace = {"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}
        job = await start(state_adapter, now=now, trace_context=trace, chain_trace_context=chain_trace)
        stored = await get_job(state_adapter, job.id)
        assert (stored.trace_context, stored.chain_trace_context) == (trace, chain_trace)

    async def test_batch_creates_every_job_and_answers_in_input_order(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        batch = [new_job(type_name=name) for name in ("x", "y", "z")]
        created = await create(state_adapter, batch, now=now)
        assert [c.job.id for c in created] == [j.id for j in batch]
        assert [c.job.type_name for c in created] == ["x", "y", "z"]
        for item in batch:
            assert (await get_job(state_adapter, item.id)).type_name == item.type_name

    async def test_empty_batch_returns_no_results(self, state_adapter: StateAdapter, now: datetime) -> None:
        assert await create(state_adapter, [], now=now) == []

    async def test_existing_chain_index_returns_the_existing_job_as_deduplicated(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        root = await start(state_adapter, now=now)
        first = await continue_chain(state_adapter, root, now=now, input="first")
        retry = continuation_of(root, input="second")
        created = await create_one(state_adapter, retry, now=now + timedelta(seconds=1))
        assert created.deduplicated is True
        assert created.job.id == first.id
        assert created.job.input == "first"
        assert await find_job(state_adapter, retry.id) is None

    async def test_same_chain_index_twice_in_one_batch_collapses_onto_the_first(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        root = await start(state_adapter, now=now)
        one, two = continuation_of(root, input=1), continuation_of(root, input=2)
        created = await create(state_adapter, [one, two], now=now)
        assert [c.deduplicated for c in created] == [False, True]
        assert created[1].job.id == one.id
        assert await find_job(state_adapter, two.id) is None

    async def test_concurrent_continuations_at_the_same_index_create_one_job(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        root = await start(state_adapter, now=now)
        attempts = [continuation_of(root, input=i) for i in range(3)]
        results = await asyncio.wait_for(
            asyncio.gather(*(create_one(state_adapter, item, now=now) for item in attempts)), timeout=30
        )
        assert sorted(r.deduplicated for r in results) == [False, True, True]
        assert len({r.job.id for r in results}) == 1
        assert (await get_chain(state_adapter, root.id)).last.id == results[0].job.id

    async def test_existing_job_id_raises_duplicate_job_id_and_writes_nothing_of_the_batch(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        existing = await start(state_adapter, now=now, type_name="original")
        fresh, clash = new_job(), new_job(id=existing.id, type_name="intruder")

        async def op(tx: StateTx) -> list[JobCreated]:
            return await tx.jobs_create(JobsCreate(jobs=[fresh, clash], now=now))

        error = await refused(state_adapter, DuplicateJobIdError, op)
        assert error.job_id == existing.id
        assert await find_job(state_adapter, fresh.id) is None
        assert await get_job(state_adapter, existing.id) == existing

    async def test_repeated_id_within_one_batch_raises_duplicate_job_id(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        job_id = new_id()
        batch = [new_job(id=job_id, type_name="a"), new_job(id=job_id, type_name="b")]

        async def op(tx: StateTx) -> list[JobCreated]:
            return await tx.jobs_create(JobsCreate(jobs=batch, now=now))

        await refused(state_adapter, DuplicateJobIdError, op)
        assert await find_job(state_adapter, job_id) is None

    async def test_continuation_reusing_another_jobs_id_raises_duplicate_job_id(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        other = await start(state_adapter, now=now, type_name="other")
        root = await start(state_adapter, now=now)

        async def op(tx: StateTx) -> list[JobCreated]:
            return await tx.jobs_create(JobsCreate(jobs=[continuation_of(root, id=other.id)], now=now))

        await refused(state_adapter, DuplicateJobIdError, op)
        assert (await get_chain(state_adapter, root.id)).last.id == root.id
        assert await get_job(state_adapter, other.id) == other


def _dedup(
    key: str = "k",
    *,
    scope: Literal["incomplete", "any"] = "incomplete",
    window: timedelta | None = None,
    exclude_chain_ids: Sequence[str] = (),
) -> Deduplication:
    return Deduplication(key=key, scope=scope, window=window, exclude_chain_ids=exclude_chain_ids)


class JobsCreateDeduplicationTests:
    """Start-time deduplication: scopes, window, exclusions, batches."""

    async def test_same_key_returns_the_existing_incomplete_chain(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        first = await start(state_adapter, now=now, deduplication=_dedup())
        created = await create_one(state_adapter, new_job(deduplication=_dedup()), now=now)
        assert created.deduplicated is True
        assert (created.job.id, created.job.chain_id) == (first.id, first.id)

    async def test_deduplicated_start_does_not_store_the_requested_id(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        await start(state_adapter, now=now, deduplication=_dedup())
        second = new_job(deduplication=_dedup(), input="ignored")
        await create_one(state_adapter, second, now=now)
        assert await find_job(state_adapter, second.id) is None

    async def test_deduplication_key_is_stored_on_the_job(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        job = await start(state_adapter, now=now, deduplication=_dedup("report-42"))
        assert (await get_job(state_adapter, job.id)).deduplication_key == "report-42"

    async def test_keys_do_not_match_across_chain_types(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        await start(state_adapter, now=now, chain_type_name="a", deduplication=_dedup())
        created = await create_one(
            state_adapter, new_job(chain_type_name="b", deduplication=_dedup()), now=now
        )
        assert created.deduplicated is False
        assert created.job.chain_type_name == "b"

    async def test_scope_incomplete_ignores_a_completed_chain(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        first = await start(state_adapter, now=now, deduplication=_dedup())
        await complete(state_adapter, first.id, now=now)
        created = await create_one(state_adapter, new_job(deduplication=_dedup()), now=now)
        assert created.deduplicated is False
        assert created.job.id != first.id

    async def test_scope_incomplete_matches_a_chain_whose_root_continued_but_last_job_is_open(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        root = await start(state_adapter, now=now, deduplication=_dedup())
        await continue_chain(state_adapter, root, now=now)
        await complete(state_adapter, root.id, now=now)
        created = await create_one(state_adapter, new_job(deduplication=_dedup()), now=now)
        assert created.deduplicated is True
        assert created.job.chain_id == root.id

    async def test_scope_incomplete_ignores_a_chain_whose_last_job_completed(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        root = await start(state_adapter, now=now, deduplication=_dedup())
        step = await continue_chain(state_adapter, root, now=now)
        await complete(state_adapter, root.id, now=now)
        await complete(state_adapter, step.id, now=now)
        created = await create_one(state_adapter, new_job(deduplication=_dedup()), now=now)
        assert created.deduplicated is False

    async def test_scope_any_matches_a_completed_chain_inside_the_window(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        dedup = _dedup(scope="any", window=timedelta(hours=1))
        first = await start(state_adapter, now=now, deduplication=dedup)
        await complete(state_adapter, first.id, now=now)
        later = now + timedelta(minutes=30)
        created = await create_one(state_adapter, new_job(deduplication=dedup), now=later)
        assert created.deduplicated is True
        assert created.job.chain_id == first.id

    async def test_scope_any_ignores_chains_created_before_the_window(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        dedup = _dedup(scope="any", window=timedelta(hours=1))
        await start(state_adapter, now=now, deduplication=dedup)
        later = now + timedelta(hours=2)
        created = await create_one(state_adapter, new_job(deduplication=dedup), now=later)
        assert created.deduplicated is False

    async def test_window_with_scope_incomplete_matches_an_open_chain_inside_it(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        dedup = _dedup(window=timedelta(hours=1))
        first = await start(state_adapter, now=now, deduplication=dedup)
        created = await create_one(
            state_adapter, new_job(deduplication=dedup), now=now + timedelta(minutes=59)
        )
        assert created.deduplicated is True
        assert created.job.chain_id == first.id

    async def test_window_with_scope_incomplete_ignores_an_open_chain_outside_it(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        dedup = _dedup(window=timedelta(hours=1))
        await start(state_adapter, now=now, deduplication=dedup)
        created = await create_one(state_adapter, new_job(deduplication=dedup), now=now + timedelta(hours=2))
        assert created.deduplicated is False

    async def test_exclude_chain_ids_skips_the_listed_chains(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        current = await start(state_adapter, now=now, deduplication=_dedup())
        successor = new_job(deduplication=_dedup(exclude_chain_ids=[current.id]))
        created = await create_one(state_adapter, successor, now=now)
        assert created.deduplicated is False
        assert created.job.id == successor.id

    async def test_newest_matching_chain_wins(self, state_adapter: StateAdapter, now: datetime) -> None:
        dedup = _dedup(scope="any", window=timedelta(hours=1))
        older = await start(state_adapter, now=now, deduplication=dedup)
        newer_dedup = _dedup(scope="any", window=timedelta(hours=1), exclude_chain_ids=[older.id])
        newer = await start(state_adapter, now=now + timedelta(seconds=1), deduplication=newer_dedup)
        assert newer.id != older.id
        created = await create_one(
            state_adapter, new_job(deduplication=dedup), now=now + timedelta(seconds=2)
        )
        assert created.job.chain_id == newer.id

    async def test_equal_keys_in_one_batch_collapse_onto_the_first(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        one, two = new_job(deduplication=_dedup()), new_job(deduplication=_dedup())
        created = await create(state_adapter, [one, two], now=now)
        assert [c.deduplicated for c in created] == [False, True]
        assert created[1].job.id == one.id
        assert await find_job(state_adapter, two.id) is None

    async def test_equal_keys_of_different_chain_types_in_one_batch_stay_apart(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        one = new_job(chain_type_name="a", deduplication=_dedup())
        two = new_job(chain_type_name="b", deduplication=_dedup())
        created = await create(state_adapter, [one, two], now=now)
        assert [c.deduplicated for c in created] == [False, False]
        assert (await get_job(state_adapter, two.id)).chain_type_name == "b"

    async def test_deduplicated_start_adds_no_blockers(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        first = await start(state_adapter, now=now, deduplication=_dedup())
        blocker = await start(state_adapter, now=now, type_name="blocker")
        again = new_job(deduplication=_dedup(), blocker_chain_ids=[blocker.id])
        created = await create_one(state_adapter, again, now=now)
        assert created.deduplicated is True
        assert created.incomplete_blocker_chain_ids == ()
        assert await blockers_of(state_adapter, first.id) == []
        assert (await get_job(state_adapter, first.id)).status is JobStatus.PENDING
