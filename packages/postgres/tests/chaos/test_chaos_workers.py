"""Chaos cell: worker processes SIGKILLed mid-job, again and again, while others carry on."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from jobchain_postgres.testing import PrivateServer

from .audit import Figures
from .cells import FULL, CellPlan, CellRun, assert_cell, run_cell

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
