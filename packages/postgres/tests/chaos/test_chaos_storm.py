"""Chaos cell: a retry storm (every job fails its first attempt) and the table bloat it leaves."""

from __future__ import annotations

import asyncio
from pathlib import Path

import psycopg
import pytest

from jobchain_postgres.testing import PrivateServer

from .audit import JOB_TABLE, Figures
from .cells import FULL, CellPlan, CellRun, assert_cell, run_cell
from .faults import conninfo
from .harness import Knobs

pytestmark = [pytest.mark.chaos, pytest.mark.xdist_group("chaos"), pytest.mark.timeout(900 if FULL else 180)]

BLOAT = f"""
SELECT n_live_tup, n_dead_tup, n_tup_upd, n_tup_hot_upd, autovacuum_count,
       pg_relation_size('{JOB_TABLE}'), pg_indexes_size('{JOB_TABLE}'), pg_total_relation_size('{JOB_TABLE}')
FROM pg_stat_user_tables WHERE relid = '{JOB_TABLE}'::regclass
"""
BLOAT_FIELDS = (
    "n_live_tup",
    "n_dead_tup",
    "n_tup_upd",
    "n_tup_hot_upd",
    "autovacuum_count",
    "table_bytes",
    "index_bytes",
    "total_bytes",
)


async def table_bloat(conninfo: str, *, settle: float = 1.5) -> dict[str, int]:
    """Live and dead tuples, updates, autovacuum runs, and sizes of the job table right now."""
    await asyncio.sleep(settle)  # statistics reach pg_stat_user_tables about a second late
    async with await psycopg.AsyncConnection.connect(conninfo, autocommit=True) as conn:
        cursor = await conn.execute(BLOAT.encode())
        row = await cursor.fetchone()
    assert row is not None
    return dict(zip(BLOAT_FIELDS, (int(v) for v in row), strict=True))


async def test_a_retry_storm_loses_nothing_and_its_bloat_is_measured(
    chaos_server: PrivateServer, tmp_path: Path, record_figures: list[Figures]
) -> None:
    rate, duration = (100.0, 120.0) if FULL else (40.0, 5.0)
    plan = CellPlan(
        name="retry-storm",
        what=f"every job fails its first attempt, {rate:.0f} chains/s for {duration:.0f} s",
        rate=rate,
        tail=0.0,
        knobs=Knobs(work=0.02, concurrency=8),
        input={"fail_first": True},
    )

    peak: dict[str, int] = {}

    async def schedule(run: CellRun) -> None:
        # The storm is the load itself: every first attempt raises. Sample the table meanwhile:
        # autovacuum may have cleaned up by the end, the peak is what the storm costs.
        ends = asyncio.get_running_loop().time() + duration
        while asyncio.get_running_loop().time() < ends:
            sample = await table_bloat(run.conninfo, settle=min(2.0, duration / 5))
            for key, value in sample.items():
                peak[key] = max(peak.get(key, 0), value)

    figures = await run_cell(plan, chaos_server, tmp_path, schedule)
    figures.extra["bloat_peak"] = peak
    figures.extra["bloat_after"] = await table_bloat(conninfo(chaos_server.port, plan.database))
    figures.extra["storm_seconds"] = duration
    record_figures.append(figures)
    # Every chain fails once and runs exactly once more; nothing runs a third time.
    assert figures.re_executions == figures.started, figures.as_json()
    assert_cell(figures, plan, max_other_re_executions=figures.started, only_faults_rerun=False)
