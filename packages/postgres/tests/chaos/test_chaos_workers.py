"""Chaos cell: worker processes SIGKILLed mid-job, again and again, while others carry on."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from jobchain_postgres.testing import PrivateServer

from .audit import Figures
from .cells import FULL, CellPlan, CellRun, assert_cell, run_cell
from .harness import Knobs

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(900 if FULL else 240)]

KILLS = 10 if FULL else 3
EVERY = 6.0 if FULL else 5.0
RECOVERY_BOUND = 60.0
"""Seconds from a kill until every chain started before it completed. Today a killed job waits
its whole lease (5 s here) and is reaped only after a claim comes back empty; measured
about 5-8 s on an idle machine; the bound leaves room for a loaded one."""


async def test_sigkilled_workers_lose_nothing_and_rerun_only_their_in_flight_jobs(
    chaos_server: PrivateServer, tmp_path: Path, record_figures: list[Figures]
) -> None:
    plan = CellPlan(name="sigkill-workers", workers=3, duration=KILLS * EVERY + 4)

    async def schedule(run: CellRun) -> None:
        for kill in range(KILLS):
            await run.kill_worker(kill % len(run.workers))
            await asyncio.sleep(EVERY)

    figures = await run_cell(plan, chaos_server, tmp_path, schedule)
    record_figures.append(figures)
    assert all(f.in_flight > 0 for f in figures.faults), f"a kill hit an idle worker: {figures.faults}"
    assert_cell(
        figures,
        max_other_re_executions=0,
        recovery_bound=RECOVERY_BOUND,
        crash_slots=KILLS * plan.knobs.concurrency,
    )


SATURATED_EXTRA = 120.0
"""Seconds beyond the cell's length. Under a backlog nobody reaps today (a worker reaps only
after an empty claim), so a killed worker's jobs wait until the producer stops and the backlog
is gone: measured 39 s in a 24 s compact cell and 101 s in a 60 s full one."""


async def test_a_sigkill_under_a_saturating_load_is_rescued(
    chaos_server: PrivateServer, tmp_path: Path, record_figures: list[Figures]
) -> None:
    """More chains per second than the workers can finish: claims never come back empty."""
    duration = 60.0 if FULL else 24.0
    plan = CellPlan(name="sigkill-saturated", workers=2, rate=45.0, duration=duration, drain_timeout=240)

    async def schedule(run: CellRun) -> None:
        await asyncio.sleep(2.0)
        await run.kill_worker(0)

    figures = await run_cell(plan, chaos_server, tmp_path, schedule)
    record_figures.append(figures)
    assert figures.faults[0].in_flight > 0, "the kill hit an idle worker"
    assert_cell(
        figures,
        max_other_re_executions=0,
        recovery_bound=duration + SATURATED_EXTRA,
        crash_slots=plan.knobs.concurrency,
    )


DEFAULTS_BOUND = 180.0
"""With default settings (60 s lease, 60 s idle poll) a killed worker's jobs wait out the
lease and, when the queue goes idle, the next poll: up to about 120 s today. Issue 16 targets
10 s; this bound only catches a rescue that never comes."""


@pytest.mark.skipif(not FULL, reason="default-settings rescue takes minutes: JOBCHAIN_CHAOS_FULL=1")
async def test_a_sigkilled_workers_jobs_are_rescued_with_default_settings(
    chaos_server: PrivateServer, tmp_path: Path, record_figures: list[Figures]
) -> None:
    knobs = Knobs(lease=60.0, poll_interval=60.0, concurrency=10, retry=10.0)
    plan = CellPlan(
        name="sigkill-defaults", workers=2, rate=10.0, duration=100.0, knobs=knobs, drain_timeout=240
    )

    async def schedule(run: CellRun) -> None:
        await asyncio.sleep(3.0)
        await run.kill_worker(0)

    figures = await run_cell(plan, chaos_server, tmp_path, schedule)
    record_figures.append(figures)
    assert figures.faults[0].in_flight > 0, "the kill hit an idle worker"
    assert_cell(
        figures, max_other_re_executions=0, recovery_bound=DEFAULTS_BOUND, crash_slots=knobs.concurrency
    )
