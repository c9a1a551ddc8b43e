"""The client's scheduling controls on the in-process adapters: start priorities and ordering
keys, continuation priorities, pause and resume (with their wake-ups), paused types, schedules."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from jobchain import ChainStart, Client, Completion, InvalidArgumentError, JobStatus, JobTypes
from jobchain.contracts.observe import Event
from jobchain.contracts.scheduling import ScheduleRegistration, SchedulesRegister
from jobchain.contracts.state import JobsAcquire
from jobchain.entities import PRIORITY_MAX, PRIORITY_MIN, PausedType
from jobchain.memory.notify import MemoryNotifyAdapter
from jobchain.memory.state import MemoryStateAdapter

START = datetime(2030, 1, 1, tzinfo=UTC)

types = JobTypes()
report = types.define("report", input=int, output=int)
urgent = types.define("urgent", input=int, output=int, entry=True, priority=50, continues_with=[report])
plain = types.define("plain", input=int, output=int, entry=True)


class Clock:
    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> datetime:
        return self.now


class Recorder:
    def __init__(self) -> None:
        self.events: list[Event] = []

    def on_event(self, event: Event) -> None:
        self.events.append(event)


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def notify(clock: Clock) -> MemoryNotifyAdapter:
    return MemoryNotifyAdapter(clock=clock)


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


@pytest.fixture
async def client(clock: Clock, notify: MemoryNotifyAdapter, recorder: Recorder) -> AsyncIterator[Client]:
    async with Client(MemoryStateAdapter(clock=clock), notify, types, [recorder], clock=clock) as c:
        yield c


async def start(client: Client, job_type: Any = plain, value: int = 1, **options: Any) -> Any:
    async with client.transaction() as tx:
        return await client.start_chain(tx, job_type, value, **options)


async def claim(client: Client, *type_names: str, limit: int = 10) -> list[str]:
    async with client.state.transaction() as stx:
        acquired = await stx.jobs_acquire(
            JobsAcquire(
                type_names=list(type_names or types.names()),
                worker_id="w",
                lease_for=timedelta(minutes=1),
                limit=limit,
            )
        )
    return [job.id for job in acquired.jobs]


class TestStartPriority:
    async def test_the_type_default_unless_overridden(self, client: Client) -> None:
        started = [
            await start(client, urgent),
            await start(client, plain),
            await start(client, urgent, priority=-3),
            await start(client, plain, priority=PRIORITY_MAX),
        ]
        assert [s.chain.root.priority for s in started] == [50, 0, -3, PRIORITY_MAX]
        stored = {job.id: job.priority for job in (await client.list_jobs()).items}
        assert [stored[s.id] for s in started] == [50, 0, -3, PRIORITY_MAX]

    async def test_start_chains_items_carry_their_own(self, client: Client) -> None:
        async with client.transaction() as tx:
            started = await client.start_chains(
                tx,
                [
                    ChainStart(job_type=plain, input=1, priority=7),
                    ChainStart(job_type=urgent, input=2),
                    ChainStart(job_type=plain, input=3, priority=PRIORITY_MIN),
                ],
            )
        assert [s.chain.root.priority for s in started] == [7, 50, PRIORITY_MIN]

    async def test_higher_priority_is_claimed_first(self, client: Client) -> None:
        low = await start(client, plain, 1, priority=-10)
        high = await start(client, plain, 2, priority=10)
        assert await claim(client, "plain", limit=1) == [high.id]
        assert await claim(client, "plain", limit=1) == [low.id]

    @pytest.mark.parametrize("bad", [PRIORITY_MAX + 1, PRIORITY_MIN - 1, 1.5, "5", True])
    async def test_bad_priority_writes_nothing(self, client: Client, bad: object) -> None:
        with pytest.raises(InvalidArgumentError, match=r"priority must be an integer from -100 to 100"):
            async with client.transaction() as tx:
                await client.start_chains(
                    tx,
                    [ChainStart(job_type=plain, input=1), ChainStart(job_type=plain, input=2, priority=bad)],  # type: ignore[arg-type]  # the bad value is the test
                )
        assert (await client.list_chains()).items == []

    async def test_continuations_get_their_own_types_default(self, client: Client) -> None:
        started = await start(client, urgent, 1, priority=90)

        async def go_on(step: Completion[Any, Any]) -> None:
            await step.continue_with(report, 5)

        async with client.transaction() as tx:
            chain = await client.complete_chain(tx, urgent, started.id, go_on)
        assert chain.root.priority == 90
        assert chain.last.type_name == "report"
        assert chain.last.priority == 0  # report's default, not the start's override
        assert chain.last.ordering_key is None


class TestOrderingKey:
    async def test_a_key_orders_chains_one_after_another(self, client: Client) -> None:
        first = await start(client, plain, 1, ordering_key="customer-42")
        second = await start(client, plain, 2, ordering_key="customer-42")
        other = await start(client, plain, 3, ordering_key="customer-7")
        assert first.ordered_after is None
        assert second.ordered_after == first.id
        assert other.ordered_after is None
        assert first.chain.root.ordering_key == "customer-42"
        assert first.chain.status is JobStatus.PENDING
        assert second.chain.status is JobStatus.BLOCKED
        assert [c.id for c in await client.get_job_blockers(second.id)] == [first.id]

    async def test_in_one_batch_in_item_order(self, client: Client) -> None:
        async with client.transaction() as tx:
            a, b = await client.start_chains(
                tx,
                [
                    ChainStart(job_type=plain, input=1, ordering_key="k"),
                    ChainStart(job_type=plain, input=2, ordering_key="k"),
                ],
            )
        assert (a.ordered_after, b.ordered_after) == (None, a.id)

    @pytest.mark.parametrize(
        ("bad", "says"),
        [("", "non-empty string"), ("x" * 256, "at most 255 characters"), (42, "non-empty string")],
    )
    async def test_bad_key_writes_nothing(self, client: Client, bad: object, says: str) -> None:
        with pytest.raises(InvalidArgumentError, match=says):
            await start(client, plain, 1, ordering_key=bad)
        assert (await client.list_chains()).items == []

    async def test_a_key_of_255_characters_is_accepted(self, client: Client) -> None:
        started = await start(client, plain, 1, ordering_key="k" * 255)
        assert started.chain.root.ordering_key == "k" * 255


class TestPause:
    async def test_pause_lists_and_resume(self, client: Client, clock: Clock) -> None:
        paused = await client.pause(urgent, "plain")
        assert paused == [
            PausedType(type_name="plain", paused_at=START),
            PausedType(type_name="urgent", paused_at=START),
        ]
        assert [p.type_name for p in await client.paused_types()] == ["plain", "urgent"]
        clock.now = START + timedelta(minutes=5)
        again = await client.pause("plain")  # idempotent: the first paused_at stays
        assert again == [PausedType(type_name="plain", paused_at=START)]
        assert await client.resume("plain", "report") == ["plain"]  # report was not paused
        assert [p.type_name for p in await client.paused_types()] == ["urgent"]

    async def test_a_paused_type_is_not_claimed_until_resumed(self, client: Client) -> None:
        waiting = await start(client, plain, 1)
        await client.pause(plain)
        assert await claim(client, "plain") == []
        await client.resume(plain)
        assert await claim(client, "plain") == [waiting.id]

    async def test_resume_wakes_workers_after_commit(
        self, client: Client, notify: MemoryNotifyAdapter
    ) -> None:
        woken: list[str] = []
        await notify.listen_job_scheduled(["plain", "urgent"], woken.append)
        await client.pause(plain, urgent)
        assert woken == []
        async with client.transaction() as tx:
            assert await client.resume(plain, urgent, tx=tx) == ["plain", "urgent"]
            assert woken == []  # not before the commit
        assert sorted(woken) == ["plain", "urgent"]

    async def test_inside_a_transaction_that_rolls_back(
        self, client: Client, notify: MemoryNotifyAdapter
    ) -> None:
        woken: list[str] = []
        await notify.listen_job_scheduled(["plain"], woken.append)

        async def pause_then_fail() -> None:
            async with client.transaction() as tx:
                await client.pause(plain, tx=tx)
                assert [p.type_name for p in await client.paused_types(tx=tx)] == ["plain"]
                raise RuntimeError("rolled back")

        async def resume_then_fail() -> None:
            async with client.transaction() as tx:
                await client.resume(plain, tx=tx)
                raise RuntimeError("rolled back")

        with pytest.raises(RuntimeError, match="rolled back"):
            await pause_then_fail()
        assert await client.paused_types() == []
        await client.pause(plain)
        with pytest.raises(RuntimeError, match="rolled back"):
            await resume_then_fail()
        assert [p.type_name for p in await client.paused_types()] == ["plain"]
        assert woken == []

    async def test_events_after_commit(self, client: Client, recorder: Recorder) -> None:
        await client.pause(plain, "unknown-type")
        await client.resume(plain)
        named = [(e.name, e.attributes.get("type_names")) for e in recorder.events]
        assert named == [
            ("job_types_paused", ["plain", "unknown-type"]),
            ("job_types_resumed", ["plain"]),
        ]

    @pytest.mark.parametrize(
        ("args", "says"),
        [
            ((), "at least one job type"),
            ((["plain"],), "separate arguments"),
            (("",), "non-empty string"),
            (("bad name!",), "may only contain"),
            ((3,), "non-empty string"),
        ],
    )
    async def test_bad_selection_writes_nothing(
        self, client: Client, args: tuple[Any, ...], says: str
    ) -> None:
        with pytest.raises(InvalidArgumentError, match=says):
            await client.pause(*args)
        with pytest.raises(InvalidArgumentError, match=says):
            await client.resume(*args)
        assert await client.paused_types() == []

    async def test_a_foreign_transaction_is_refused(self, client: Client, clock: Clock) -> None:
        from jobchain import TransactionRequiredError

        async with Client(MemoryStateAdapter(clock=clock), None, types) as other, other.transaction() as tx:
            with pytest.raises(TransactionRequiredError):
                await client.pause(plain, tx=tx)


class TestSchedules:
    async def test_listed_as_registered(self, client: Client) -> None:
        assert await client.list_schedules() == []
        async with client.state.transaction() as stx:
            await stx.schedules_register(
                SchedulesRegister(
                    schedules=[
                        ScheduleRegistration(
                            name="nightly",
                            cron="0 3 * * *",
                            timezone="Europe/Paris",
                            type_name="plain",
                            catch_up=True,
                            worker_name="w1",
                            next_tick_at=START + timedelta(hours=2),
                        ),
                        ScheduleRegistration(
                            name="hourly",
                            cron="0 * * * *",
                            timezone="UTC",
                            type_name="urgent",
                            catch_up=False,
                            worker_name="w1",
                        ),
                    ],
                    now=START,
                )
            )
        listed = await client.list_schedules()
        assert [s.name for s in listed] == ["hourly", "nightly"]
        nightly = listed[1]
        assert (nightly.cron, nightly.timezone, nightly.type_name, nightly.catch_up) == (
            "0 3 * * *",
            "Europe/Paris",
            "plain",
            True,
        )
        assert (nightly.registered_at, nightly.last_seen_at) == (START, START)
        assert nightly.next_tick_at == START + timedelta(hours=2)
        assert nightly.last_tick_at is None
