"""Persisted periodic schedules (``schedules_register``, ``schedules_list``): upsert by name,
``registered_at`` kept, ``last_seen_at`` moved, ``last_tick_at`` only forward (with its
``last_chain_id``), rows last seen before ``forget_before`` deleted, listed by name.
"""

from __future__ import annotations

from contextlib import suppress
from dataclasses import replace
from datetime import datetime, timedelta

from jobchain.contracts import StateAdapter
from jobchain.contracts.scheduling import ScheduleRegistration, SchedulesList, SchedulesRegister
from jobchain.entities import ScheduleRecord, new_id
from jobchain_conformance.helpers import assert_time, list_schedules, register_schedules
from jobchain_conformance.suites.state_transactions import RollbackError

MINUTE = timedelta(minutes=1)
HOUR = timedelta(hours=1)


def registration(name: str = "nightly", **fields: object) -> ScheduleRegistration:
    values: dict[str, object] = {
        "name": name,
        "cron": "0 3 * * *",
        "timezone": "Europe/Paris",
        "type_name": "report",
        "catch_up": True,
        "worker_name": "worker-1",
    }
    values.update(fields)
    return ScheduleRegistration(**values)  # type: ignore[arg-type]


def by_name(records: list[ScheduleRecord]) -> dict[str, ScheduleRecord]:
    return {record.name: record for record in records}


class SchedulesRegisterTests:
    """Registration upserts by name; the tick only moves forward; old rows are forgotten."""

    async def test_a_registration_is_stored_with_every_field(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        tick, chain = now - HOUR, new_id()
        given = registration(next_tick_at=now + HOUR, last_tick_at=tick, last_chain_id=chain, catch_up=False)
        returned = await register_schedules(state_adapter, [given], now=now)
        (stored,) = await list_schedules(state_adapter)
        assert by_name(returned)["nightly"] == stored
        assert (stored.name, stored.cron, stored.timezone, stored.type_name, stored.catch_up) == (
            "nightly",
            "0 3 * * *",
            "Europe/Paris",
            "report",
            False,
        )
        assert (stored.worker_name, stored.last_chain_id) == ("worker-1", chain)
        assert_time(state_adapter, stored.registered_at, now)
        assert_time(state_adapter, stored.last_seen_at, now)
        assert_time(state_adapter, stored.last_tick_at, tick)
        assert_time(state_adapter, stored.next_tick_at, now + HOUR)

    async def test_registering_again_updates_the_row_and_keeps_registered_at(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        await register_schedules(state_adapter, [registration()], now=now)
        later = now + MINUTE
        changed = registration(cron="*/5 * * * *", worker_name="worker-2", next_tick_at=later + MINUTE)
        await register_schedules(state_adapter, [changed], now=later)
        (stored,) = await list_schedules(state_adapter)
        assert (stored.cron, stored.worker_name) == ("*/5 * * * *", "worker-2")
        assert_time(state_adapter, stored.registered_at, now)
        assert_time(state_adapter, stored.last_seen_at, later)
        assert_time(state_adapter, stored.next_tick_at, later + MINUTE)

    async def test_last_tick_at_only_moves_forward_with_its_chain(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        ticks = [now - 3 * HOUR, now - 2 * HOUR, now - HOUR]
        chains = [new_id() for _ in ticks]
        await register_schedules(
            state_adapter, [registration(last_tick_at=ticks[1], last_chain_id=chains[1])], now=now
        )
        older = registration(last_tick_at=ticks[0], last_chain_id=chains[0])
        returned = await register_schedules(state_adapter, [older], now=now + MINUTE)
        (kept,) = await list_schedules(state_adapter)
        assert by_name(returned)["nightly"] == kept
        assert kept.last_chain_id == chains[1]
        assert_time(state_adapter, kept.last_tick_at, ticks[1])
        assert_time(state_adapter, kept.last_seen_at, now + MINUTE)
        await register_schedules(state_adapter, [registration()], now=now + 2 * MINUTE)
        (still,) = await list_schedules(state_adapter)
        assert still.last_chain_id == chains[1]
        assert_time(state_adapter, still.last_tick_at, ticks[1])
        newer = registration(last_tick_at=ticks[2], last_chain_id=chains[2])
        await register_schedules(state_adapter, [newer], now=now + 3 * MINUTE)
        (moved,) = await list_schedules(state_adapter)
        assert moved.last_chain_id == chains[2]
        assert_time(state_adapter, moved.last_tick_at, ticks[2])

    async def test_rows_last_seen_before_forget_before_are_deleted(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        await register_schedules(state_adapter, [registration("old"), registration("kept")], now=now)
        await register_schedules(state_adapter, [registration("kept")], now=now + HOUR)
        await register_schedules(
            state_adapter, [registration("fresh")], now=now + 2 * HOUR, forget_before=now + MINUTE
        )
        assert [record.name for record in await list_schedules(state_adapter)] == ["fresh", "kept"]

    async def test_a_row_registered_in_the_same_call_is_not_forgotten(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        await register_schedules(state_adapter, [registration("again")], now=now)
        await register_schedules(
            state_adapter, [registration("again")], now=now + HOUR, forget_before=now + MINUTE
        )
        (stored,) = await list_schedules(state_adapter)
        assert stored.name == "again"
        assert_time(state_adapter, stored.last_seen_at, now + HOUR)

    async def test_schedules_are_listed_by_name(self, state_adapter: StateAdapter, now: datetime) -> None:
        names = ["weekly", "Hourly", "daily"]
        await register_schedules(state_adapter, [registration(name) for name in names], now=now)
        listed = [record.name for record in await list_schedules(state_adapter)]
        assert listed == ["Hourly", "daily", "weekly"]

    async def test_several_schedules_register_in_one_call(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        first = registration("a", type_name="report")
        second = replace(registration("b"), type_name="cleanup", cron="*/10 * * * *")
        returned = await register_schedules(state_adapter, [first, second], now=now)
        assert sorted(by_name(returned)) == ["a", "b"]
        stored = by_name(await list_schedules(state_adapter))
        assert (stored["a"].type_name, stored["b"].type_name, stored["b"].cron) == (
            "report",
            "cleanup",
            "*/10 * * * *",
        )

    async def test_a_registration_that_rolls_back_is_not_stored(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        with suppress(RollbackError):
            async with state_adapter.transaction() as tx:
                await tx.schedules_register(SchedulesRegister(schedules=[registration()], now=now))
                assert [record.name for record in await tx.schedules_list(SchedulesList())] == ["nightly"]
                raise RollbackError
        assert await list_schedules(state_adapter) == []
