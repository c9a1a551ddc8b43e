"""Batched chain starts: what is checked once per job type must fail exactly as per item did.

start_chains resolves a job type, checks it is an entry type and encodes a None input once
per type of the batch, draws its ids from one new_ids() call and, when nobody observes,
buffers one wake-up per type with the batch's count. These tests pin the results, the
errors (the first failing item wins, nothing written) and the buffered side effects.
"""

from __future__ import annotations

import dataclasses
import inspect
import pickle
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from jobchain import (
    ChainStart,
    Client,
    Deduplication,
    InvalidArgumentError,
    JobStatus,
    JobTypes,
    JobTypeValidationError,
    Schedule,
)
from jobchain.client import ChainStarted
from jobchain.contracts.observe import Event
from jobchain.entities import Chain, Job, new_ids, validate_id
from jobchain.errors import UnknownJobTypeError
from jobchain.memory.state import MemoryStateAdapter

START = datetime(2030, 1, 1, tzinfo=UTC)


@dataclass
class Fetch:
    url: str


types = JobTypes()
ping = types.define("ping", input=None, output=None, entry=True)
INT_OR_NONE: Any = int | None
maybe = types.define("maybe", input=INT_OR_NONE, output=None, entry=True)
fetch = types.define("fetch", input=Fetch, output=None, entry=True)
inner = types.define("inner", input=None, output=None)
tiny = types.define("tiny", input=None, output=None, entry=True, max_payload_bytes=3)


def cs(**fields: Any) -> ChainStart[Any]:
    """A ChainStart with any (also wrong) field types: the tests pass bad ones on purpose."""
    return ChainStart(**fields)


class Recorder:
    def __init__(self) -> None:
        self.events: list[Event] = []

    def on_event(self, event: Event) -> None:
        self.events.append(event)


@pytest.fixture
async def client() -> AsyncIterator[Client]:
    async with Client(MemoryStateAdapter(), None, types, clock=lambda: START) as c:
        yield c


async def _count_jobs(client: Client) -> int:
    page = await client.list_chains(limit=500)
    return len(page.items)


class TestResults:
    async def test_a_batch_deduplicating_onto_more_chains_than_a_page_answers_every_item(
        self, client: Client
    ) -> None:
        # The deduplicated items' chains are read back by id; 501 of them exceed one page (500).
        keys = [f"k{i}" for i in range(501)]
        async with client.transaction() as tx:
            first = await client.start_chains(
                tx, [cs(job_type=ping, input=None, deduplication=Deduplication(key=k)) for k in keys]
            )
        async with client.transaction() as tx:
            again = await client.start_chains(
                tx, [cs(job_type=ping, input=None, deduplication=Deduplication(key=k)) for k in keys]
            )
        assert all(s.deduplicated for s in again)
        assert [s.id for s in again] == [s.id for s in first]
        assert [s.chain for s in again] == [s.chain for s in first]

    async def test_a_mixed_batch_keeps_input_order_and_each_items_values(self, client: Client) -> None:
        explicit = "01890a5d-ac96-774b-bcce-b302099a8057"
        starts: list[ChainStart[Any]] = [
            cs(job_type=ping, input=None),
            cs(job_type="maybe", input=3),
            cs(job_type=fetch, input=Fetch("u"), id=explicit),
            cs(job_type=maybe, input=None),
            cs(job_type="ping", input=None, schedule=Schedule(after=timedelta(seconds=5))),
        ]
        async with client.transaction() as tx:
            started = await client.start_chains(tx, starts)
        assert [s.chain.type_name for s in started] == ["ping", "maybe", "fetch", "maybe", "ping"]
        assert [s.chain.root.input for s in started] == [None, 3, {"url": "u"}, None, None]
        assert started[2].id == explicit
        assert [s.deduplicated for s in started] == [False] * 5
        assert started[4].chain.root.scheduled_at == START + timedelta(seconds=5)
        assert all(s.chain.root is s.chain.last for s in started)
        assert len({s.id for s in started}) == 5
        for s in started:
            assert await client.get_chain(s.id) == s.chain

    async def test_generated_ids_are_version_7_and_increase_through_the_batch(self, client: Client) -> None:
        async with client.transaction() as tx:
            started = await client.start_chains(tx, [cs(job_type=ping, input=None)] * 300)
        ids = [s.id for s in started]
        assert ids == sorted(ids)
        assert len(set(ids)) == 300
        assert all(uuid.UUID(i).version == 7 for i in ids)


class TestErrorsComeFromTheFirstFailingItem:
    @pytest.mark.parametrize(
        ("bad", "error", "code"),
        [
            (cs(job_type=inner, input=None), JobTypeValidationError, "not_entry_point"),
            (cs(job_type="nope", input=None), UnknownJobTypeError, None),
            (cs(job_type=fetch, input=None), JobTypeValidationError, "invalid_input"),
            (cs(job_type=tiny, input=None), JobTypeValidationError, "invalid_input"),
            (cs(job_type=ping, input=1), JobTypeValidationError, "invalid_input"),
            (cs(job_type=ping, input=None, id="not-an-id"), Exception, None),
            (cs(job_type=ping, input=None, schedule=5), InvalidArgumentError, None),
            (cs(job_type=ping, input=None, blockers="x"), InvalidArgumentError, None),
            (cs(job_type=ping, input=None, deduplication="k"), InvalidArgumentError, None),
            (cs(job_type=[ping], input=None), InvalidArgumentError, None),
        ],
    )
    async def test_after_good_items_of_the_same_type(
        self, client: Client, bad: ChainStart[Any], error: type[Exception], code: str | None
    ) -> None:
        good = [cs(job_type=ping, input=None), cs(job_type=maybe, input=None)]
        for batch in ([*good, bad, *good], [bad, *good], [*good, *good, bad]):
            async with client.transaction() as tx:
                with pytest.raises(error) as raised:
                    await client.start_chains(tx, batch)
            if code is not None:
                assert getattr(raised.value, "code", None) == code
        assert await _count_jobs(client) == 0

    async def test_a_type_rejecting_none_fails_every_time_not_only_first(self, client: Client) -> None:
        for batch in (
            [cs(job_type=fetch, input=Fetch("u")), cs(job_type=fetch, input=None)],
            [cs(job_type=fetch, input=None), cs(job_type=fetch, input=None)],
        ):
            async with client.transaction() as tx:
                with pytest.raises(JobTypeValidationError):
                    await client.start_chains(tx, batch)
        assert await _count_jobs(client) == 0

    async def test_a_non_chainstart_item_names_itself(self, client: Client) -> None:
        async with client.transaction() as tx:
            with pytest.raises(InvalidArgumentError, match="got 'oops'"):
                await client.start_chains(tx, [cs(job_type=ping, input=None), "oops"])  # type: ignore[list-item]


class TestBufferedSideEffects:
    async def test_without_observers_one_wake_up_per_type_with_the_batch_count(self, client: Client) -> None:
        later = Schedule(after=timedelta(minutes=1))
        starts: list[ChainStart[Any]] = [
            cs(job_type=maybe, input=None),
            cs(job_type=ping, input=None),
            cs(job_type=maybe, input=1),
            cs(job_type=ping, input=None, schedule=later),  # scheduled later: still pending
            cs(job_type=maybe, input=2),
        ]
        async with client.transaction() as tx:
            await client.start_chains(tx, starts)
            assert tx.hooks.scheduled == {"maybe": 3, "ping": 2}
            assert list(tx.hooks.scheduled) == ["maybe", "ping"]  # first-seen order, as per item
            assert tx.hooks.events == []

    async def test_with_observers_events_per_chain_in_order(self) -> None:
        recorder = Recorder()
        async with Client(MemoryStateAdapter(), None, types, [recorder], clock=lambda: START) as c:
            async with c.transaction() as tx:
                started = await c.start_chains(
                    tx, [cs(job_type=ping, input=None), cs(job_type=maybe, input=None)]
                )
                assert tx.hooks.scheduled == {"ping": 1, "maybe": 1}
        names = [(e.name, e.attributes.get("chain_id")) for e in recorder.events]
        assert names == [
            ("chain_created", started[0].id),
            ("job_created", started[0].id),
            ("chain_created", started[1].id),
            ("job_created", started[1].id),
        ]

    async def test_blocked_roots_are_not_scheduled(self, client: Client) -> None:
        async with client.transaction() as tx:
            [blocker] = await client.start_chains(tx, [cs(job_type=ping, input=None)])
        async with client.transaction() as tx:
            started = await client.start_chains(
                tx,
                [
                    cs(job_type=ping, input=None, blockers=[blocker.chain]),
                    cs(job_type=ping, input=None),
                ],
            )
            assert started[0].chain.status is JobStatus.BLOCKED
            assert tx.hooks.scheduled == {"ping": 1}


class TestNewIds:
    def test_canonical_version_7_sorted_and_unique(self) -> None:
        before = time.time_ns() // 1_000_000
        ids = new_ids(5000)
        after = time.time_ns() // 1_000_000
        assert len(set(ids)) == 5000
        assert ids == sorted(ids)
        for value in ids:
            parsed = uuid.UUID(value)
            assert parsed.version == 7
            assert parsed.variant == uuid.RFC_4122
            assert validate_id(value) == value
            assert before <= parsed.int >> 80 <= after

    def test_every_random_digit_varies(self) -> None:
        ids = new_ids(2000)
        for position in range(36):
            if position in (8, 13, 18, 23) or position < 13:
                continue  # hyphens and the millisecond
            digits = {value[position] for value in ids}
            expected = 1 if position == 14 else 4 if position == 19 else 16
            assert len(digits) == expected, position
        assert {value[19] for value in ids} == set("89ab")

    def test_zero_and_one(self) -> None:
        assert new_ids(0) == []
        [one] = new_ids(1)
        assert uuid.UUID(one).version == 7


class TestJobInit:
    def _job(self, **changes: Any) -> Job:
        values: dict[str, Any] = {
            "id": "a",
            "chain_id": "a",
            "type_name": "t",
            "chain_type_name": "t",
            "chain_index": 0,
            "status": JobStatus.PENDING,
            "input": {"k": 1},
            "created_at": START,
            "scheduled_at": START,
        }
        return Job(**{**values, **changes})

    @pytest.mark.parametrize("cls", [Job, Chain, ChainStart, ChainStarted])
    def test_same_signature_as_the_dataclass(self, cls: type) -> None:
        params = inspect.signature(cls).parameters
        fields = dataclasses.fields(cls)
        assert list(params) == [f.name for f in fields]
        for f in fields:
            kind = inspect.Parameter.KEYWORD_ONLY if f.kw_only else inspect.Parameter.POSITIONAL_OR_KEYWORD
            assert params[f.name].kind is kind
            assert params[f.name].default == (
                inspect.Parameter.empty if f.default is dataclasses.MISSING else f.default
            )

    def test_positional_fields_still_take_positions_and_names(self) -> None:
        job = self._job()
        assert ChainStarted(Chain(job, job)) == ChainStarted(
            chain=Chain(root=job, last=job), deduplicated=False
        )
        with pytest.raises(
            TypeError, match=r"Chain.__init__\(\) missing 1 required positional argument: 'last'"
        ):
            Chain(job)  # type: ignore[call-arg]
        with pytest.raises(TypeError, match=r"ChainStarted.__init__\(\) takes from 2 to 3 positional"):
            ChainStarted(Chain(job, job), False, 1)  # type: ignore[call-arg]
        with pytest.raises(dataclasses.FrozenInstanceError):
            Chain(job, job).root = job  # type: ignore[misc]

    def test_values_and_defaults(self) -> None:
        job = self._job(attempt=2, leased_by="w")
        assert (job.attempt, job.leased_by, job.output, job.lease_generation) == (2, "w", None, 0)
        assert job == self._job(attempt=2, leased_by="w")
        assert pickle.loads(pickle.dumps(job)) == job
        assert dataclasses.replace(job, attempt=3).attempt == 3

    def test_frozen_and_strict_about_arguments(self) -> None:
        job = self._job()
        with pytest.raises(dataclasses.FrozenInstanceError):
            job.id = "b"  # type: ignore[misc]
        with pytest.raises(TypeError, match=r"Job.__init__\(\) missing"):
            Job(id="a")  # type: ignore[call-arg]
        with pytest.raises(TypeError, match="unexpected keyword argument 'nope'"):
            self._job(nope=1)
        with pytest.raises(TypeError, match="positional"):
            Job("a")  # type: ignore[call-arg]
