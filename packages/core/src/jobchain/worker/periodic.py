"""The worker's scheduler: starts one chain per tick of its periodic schedules.

Every worker whose processors declare a schedule runs it; exactly one chain per tick comes
out of all of them because each tick's chain is started with the same deduplication key
(``periodic:<name>:<tick UTC ISO>``, scope ``any``, held until an hour past the next tick),
which the state backend makes safe under concurrent starts.

At start the scheduler registers its schedules (``schedules_register``, forgetting rows no
worker registered for a week) and reads back the last tick any worker did and when the
schedule was first registered. With ``catch_up`` it then starts the latest tick at or before
now if no worker did it yet and the schedule existed by then (first registered at or before
it) — only that one, never one per missed tick. A schedule's first deploy starts nothing
for the ticks before it: a daily 03:00 job deployed at 21:54 first runs at the next 03:00.
From then on it starts each tick when it is due (:meth:`Scheduler.run_due`, a function of
``now`` so tests drive it with an injected clock) and registers the tick (``last_tick_at``,
``last_chain_id``, ``next_tick_at``). A clock that jumps over several ticks (a suspended
machine) starts the latest of them only.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from jobchain.contracts import ScheduleRegistration, SchedulesRegister
from jobchain.entities import ScheduleRecord
from jobchain.errors import SchemaNotMigratedError
from jobchain.periodic import PeriodicSchedule, due_tick
from jobchain.worker.backoff import Backoff
from jobchain.worker.failures import now_of
from jobchain.worker.outage import FailureStreak, wait_or_timeout
from jobchain.worker.rescues import Emit

if TYPE_CHECKING:
    from jobchain.client import Client

log = logging.getLogger("jobchain.worker")

FORGET_AFTER = timedelta(days=7)
"""A registered schedule no worker registered for this long is deleted (removed from code)."""

REFRESH_EVERY = timedelta(hours=1)
"""Registrations are refreshed at least this often, so a rare schedule is never forgotten."""

MAX_SLEEP_SECONDS = 60.0
"""The scheduler looks at the clock at least this often (a clock may jump)."""


@dataclass(frozen=True, slots=True)
class TickStarted:
    """A tick's chain as :meth:`Scheduler.run_due` started it (or found it already started)."""

    name: str
    tick: datetime
    chain_id: str
    deduplicated: bool


class Scheduler:
    """Runs the periodic schedules of one worker (see the module docstring)."""

    def __init__(
        self,
        client: Client,
        schedules: Mapping[str, PeriodicSchedule],
        worker_name: str,
        worker_id: str,
        *,
        emit: Emit,
        recovery: Backoff,
    ) -> None:
        self._client = client
        # By name: every worker upserts the rows in one order, so registrations never deadlock.
        self.schedules = dict(sorted(schedules.items()))
        self._worker_name = worker_name
        self._worker_id = worker_id
        self._emit = emit
        self._recovery = recovery
        self._lock = asyncio.Lock()
        # Per schedule: the latest tick known done (by any worker); None before the first.
        self._after: dict[str, datetime | None] = {}
        self._registered_at: datetime | None = None
        self._streak = FailureStreak(log, f"worker {worker_id} scheduler")
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    # ------------------------------------------------------------------ task

    def start(self) -> None:
        """Run the scheduler task (its first run, with the catch-up, is at once)."""
        self._task = asyncio.create_task(self._run(), name=f"jobchain-scheduler-{self._worker_id}")

    async def stop(self) -> None:
        """Stop the task (a start in flight is cancelled; its transaction rolls back)."""
        self._stop.set()
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def _run(self) -> None:
        failures = 0
        while not self._stop.is_set():
            try:
                now = now_of(self._client)
                await self.run_due(now)
                self._streak.succeeded()
                failures = 0
                wait = self._seconds_to_next_tick(now_of(self._client))
            except asyncio.CancelledError:
                raise
            except SchemaNotMigratedError:
                return  # the claim loop stops the worker on the same error
            except Exception as error:
                failures += 1
                self._streak.failed(error, "ticks are started once the database answers")
                self._emit("worker_error", {"error": repr(error), "operation": "periodic"}, log_line=False)
                wait = self._recovery.delay(failures).total_seconds()
            await wait_or_timeout(self._stop, wait)

    def _seconds_to_next_tick(self, now: datetime) -> float:
        soonest = min(s.ticks.next_after(now) for s in self.schedules.values())
        return min(max((soonest - now).total_seconds(), 0.0), MAX_SLEEP_SECONDS)

    # ------------------------------------------------------------------ ticks

    async def run_due(self, now: datetime) -> list[TickStarted]:
        """Start the chain of every schedule's due tick at ``now``; register what was started.

        The first call registers the schedules and learns the last tick any worker did. A
        schedule's due tick is its latest tick at or before ``now`` that is later than the
        last one done (by this worker or, as registered, another); at the first call only ticks
        after the schedule was first registered count (with ``catch_up``), or after ``now``
        (without). Safe to call from several workers at
        once: each tick still gets one chain.
        """
        async with self._lock:
            if self._registered_at is None:
                await self._register_first(now)
            started: list[TickStarted] = []
            for schedule in self.schedules.values():
                tick = due_tick(schedule.ticks, now, self._after.get(schedule.name))
                if tick is None:
                    continue
                started.append(await self._start(schedule, tick))
                self._after[schedule.name] = tick
            registrations = [self._registration(s, now) for s in self.schedules.values()]
            stale = self._registered_at is not None and now - self._registered_at >= REFRESH_EVERY
            if started or stale:
                await self._register(registrations, now, {t.name: t for t in started})
            return started

    async def _register_first(self, now: datetime) -> None:
        records = await self._register([self._registration(s, now) for s in self.schedules.values()], now, {})
        by_name = {record.name: record for record in records}
        just_before = timedelta(microseconds=1)  # a tick at exactly that moment counts
        for schedule in self.schedules.values():
            record = by_name.get(schedule.name)
            done = record.last_tick_at if record is not None else None
            if not schedule.catch_up:
                # Only ticks after the worker started.
                self._after[schedule.name] = _latest(done, now - just_before)
            else:
                # Missed ticks are those since the schedule first existed: a tick before its
                # first registration was never due (the first deploy of a weekly billing job
                # must not bill at once).
                existed = record.registered_at if record is not None else now
                self._after[schedule.name] = _latest(done, existed - just_before)

    async def _start(self, schedule: PeriodicSchedule, tick: datetime) -> TickStarted:
        client = self._client
        async with client.transaction() as tx:
            started = await client.start_chain(
                tx, schedule.job_type, schedule.input, deduplication=schedule.deduplication(tick)
            )
        self._emit(
            "periodic_tick",
            {
                "schedule": schedule.name,
                "tick": tick.isoformat(),
                "chain.id": started.id,
                "deduplicated": started.deduplicated,
            },
            log_line=not started.deduplicated,
        )
        return TickStarted(schedule.name, tick, started.id, started.deduplicated)

    def _registration(self, schedule: PeriodicSchedule, now: datetime) -> ScheduleRegistration:
        return ScheduleRegistration(
            name=schedule.name,
            cron=schedule.cron,
            timezone=schedule.timezone,
            type_name=schedule.job_type.name,
            catch_up=schedule.catch_up,
            worker_name=self._worker_name,
            next_tick_at=schedule.ticks.next_after(now),
        )

    async def _register(
        self, registrations: list[ScheduleRegistration], now: datetime, started: Mapping[str, TickStarted]
    ) -> list[ScheduleRecord]:
        rows = [
            replace(r, last_tick_at=started[r.name].tick, last_chain_id=started[r.name].chain_id)
            if r.name in started
            else r
            for r in registrations
        ]
        async with self._client.state.transaction() as tx:
            records = await tx.schedules_register(
                SchedulesRegister(schedules=rows, forget_before=now - FORGET_AFTER, now=now)
            )
        self._registered_at = now
        return list(records)


def _latest(a: datetime | None, b: datetime) -> datetime:
    return b if a is None or b > a else a
