"""Chain-level report figures on a seeded two-step history with known numbers, on both backends.

The two chain tables are computed as ``build_report`` computes them (the same functions on
the same reads), not through a whole report (about sixty Spark jobs for two tables); that
the report carries them is asserted by test_report.py and test_lifecycle.py.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest
import sparkkit

from jobchain.connect_backends import open_state
from jobchain_spark import read_table
from jobchain_spark.report import ACCURACY, QUANTILES
from jobchain_spark.report_chains import chain_durations, chain_steps

pytestmark = [pytest.mark.spark, pytest.mark.timeout(900)]


def at(seconds: float) -> Any:
    return sparkkit.T0 + timedelta(seconds=seconds)


async def _seed(url: str) -> None:
    """Three ``resize`` chains of two steps (resize → notify_step); the third is not finished.

    chain  created  root claimed  root done (continued)  step 2 claimed  step 2 done  duration
    A      0        10            20                     50              80           80 s
    B      100      105           125                    130             200          100 s
    C      300      301           302                    (never)         —            —
    """
    state = await open_state(url)
    try:
        for created, claimed, continued, step_claimed, step_done in (
            (0, 10, 20, 50, 80),
            (100, 105, 125, 130, 200),
        ):
            [root] = await sparkkit.create(state, "resize", 1, at(created))
            await sparkkit.run(
                state, root, started=at(claimed), finished=at(continued), continue_with="notify_step"
            )
            await sparkkit.run(state, "notify_step", started=at(step_claimed), finished=at(step_done))
        [root] = await sparkkit.create(state, "resize", 1, at(300))
        await sparkkit.run(state, root, started=at(301), finished=at(302), continue_with="notify_step")
    finally:
        await state.close()


def test_chain_durations_and_steps_on_a_known_history(spark: Any, state_url: str) -> None:
    asyncio.run(_seed(state_url))
    jobs = read_table(spark, state_url, "jobs", partitions=4)  # build_report's reads
    chains = read_table(spark, state_url, "chains", partitions=4)

    [durations] = chain_durations(chains, QUANTILES, ACCURACY).toPandas().to_dict("records")
    assert (durations["chain_type"], durations["chains"], durations["completed"]) == ("resize", 3, 2)
    # Root created → last job completed, over the two completed chains (nearest rank).
    assert (durations["duration_p50_s"], durations["duration_p95_s"], durations["duration_p99_s"]) == (
        80,
        100,
        100,
    )

    steps = {
        (r["chain_type"], r["step"], r["type_name"]): (
            r["jobs"],
            r["completed"],
            r["latency_p50_s"],
            r["wait_p50_s"],
            r["run_p50_s"],
        )
        for r in chain_steps(jobs, ACCURACY).toPandas().to_dict("records")
    }
    assert steps == {
        # Roots: latencies 20, 25, 2; waits 10, 5, 1; runs 10, 20, 1.
        ("resize", 1, "resize"): (3, 3, 20, 5, 10),
        # Second steps, created when their root completed: latencies 60, 75; waits 30, 5;
        # runs 30, 70; C's second step is pending, so it counts as a job only.
        ("resize", 2, "notify_step"): (3, 2, 60, 5, 30),
    }
