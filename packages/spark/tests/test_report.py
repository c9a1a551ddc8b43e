"""Report on a seeded history with known numbers; the HTML renders with real PNG charts."""

from __future__ import annotations

import asyncio
import math
from datetime import timedelta
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import sparkkit

from jobchain.connect_backends import open_state
from jobchain_spark import SparkOptionError
from jobchain_spark.report import build_report
from jobchain_spark.report_output import CHARTS, write_report

pytestmark = [pytest.mark.spark, pytest.mark.timeout(900)]

T0 = sparkkit.T0
NOW = T0 + timedelta(hours=3)


def at(seconds: float) -> Any:
    return T0 + timedelta(seconds=seconds)


async def _seed(url: str) -> None:
    state = await open_state(url)
    try:
        for i in range(4):  # latencies 10, 20, 30, 40 s
            [job] = await sparkkit.create(state, "resize", 1, at(60 * i))
            await sparkkit.run(state, job, started=at(60 * i + 1), finished=at(60 * i + 10 * (i + 1)))
        [job] = await sparkkit.create(state, "resize", 1, at(600))  # fails once, then 60 s latency
        await sparkkit.run(state, job, started=at(601), finished=at(605), fail_with="boom", retry_at=at(630))
        await sparkkit.run(state, job, started=at(630), finished=at(660))
        for _ in range(2):  # two emails in hour 1, 5 s each
            [mail] = await sparkkit.create(
                state, "send_email", 1, at(3600), input={"to": "a", "subject": "b"}
            )
            await sparkkit.run(state, mail, started=at(3601), finished=at(3605))
        [stuck] = await sparkkit.create(state, "resize", 1, at(7200))  # pending again after a timeout
        await sparkkit.run(
            state,
            stuck,
            started=at(7201),
            finished=at(7210),
            fail_with="timeout\nat line 3",
            retry_at=at(36000),
        )
        await sparkkit.create(state, "resize", 1, at(9000))
    finally:
        await state.close()


def test_report_figures_on_a_known_history(spark: Any, sqlite_url: str, tmp_path: Path) -> None:
    asyncio.run(_seed(sqlite_url))
    report = build_report(spark, url=sqlite_url, period="hour", now=NOW)
    summary = report.tables["summary"].set_index("type_name")
    resize, email = summary.loc["resize"], summary.loc["send_email"]
    assert (resize["jobs"], resize["completed"], resize["retried"], resize["attempted"]) == (7, 5, 1, 6)
    assert math.isclose(resize["retry_rate"], 1 / 6)
    assert (resize["latency_p50_s"], resize["latency_p95_s"], resize["latency_p99_s"]) == (30, 60, 60)
    assert resize["retry_delay_p50_s"] == 55  # failed at +605, completed at +660
    assert resize["oldest_pending_age_s"] == 3 * 3600 - 7200
    assert (email["jobs"], email["latency_p50_s"], email["latency_p99_s"]) == (2, 5, 5)
    assert pd.isna(email["oldest_pending_age_s"])

    throughput = report.tables["throughput"]
    rows = {(r.type_name, r.period.hour): (r.started, r.completed) for r in throughput.itertuples()}
    assert rows == {("resize", 0): (5, 5), ("send_email", 1): (2, 2), ("resize", 2): (2, 0)}
    assert throughput["throughput_per_hour"].max() == 5

    attempts = {(r.type_name, r.attempt): r.jobs for r in report.tables["attempts"].itertuples()}
    assert attempts == {("resize", 1): 5, ("resize", 2): 1, ("send_email", 1): 2}
    errors = [(r.type_name, r.error, r.jobs) for r in report.tables["errors"].itertuples()]
    assert errors == [("resize", "timeout", 1)]
    statuses = {(r.chain_type, r.status): r.chains for r in report.tables["chains_by_status"].itertuples()}
    assert statuses == {("resize", "completed"): 5, ("resize", "pending"): 2, ("send_email", "completed"): 2}

    html_path = write_report(report, tmp_path / "out")
    html = html_path.read_text()
    for name in CHARTS.values():
        assert f"charts/{name}" in html
        png = (tmp_path / "out" / "charts" / name).read_bytes()
        assert png.startswith(b"\x89PNG\r\n\x1a\n")
        assert len(png) > 2000
    for table in report.tables:
        assert (tmp_path / "out" / "tables" / f"{table}.parquet").stat().st_size > 0
        assert (
            pd.read_csv(tmp_path / "out" / "tables" / f"{table}.csv").shape[0]
            == report.tables[table].shape[0]
        )


def test_report_rejects_an_unknown_period(spark: Any, sqlite_url: str) -> None:
    with pytest.raises(SparkOptionError, match="period"):
        build_report(spark, url=sqlite_url, period="fortnight")
