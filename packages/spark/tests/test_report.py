"""Report on a seeded history with known numbers; the HTML renders with real PNG charts."""

from __future__ import annotations

import asyncio
import math
import re
import shutil
from datetime import timedelta
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import sparkkit

from jobchain.connect_backends import open_state
from jobchain_spark import SparkOptionError
from jobchain_spark.archive import archive
from jobchain_spark.report import build_report
from jobchain_spark.report_errors import ERRORS_NOTE
from jobchain_spark.report_output import CHARTS, write_report

pytestmark = [pytest.mark.spark, pytest.mark.timeout(900)]

T0 = sparkkit.T0
NOW = T0 + timedelta(hours=3)


def at(seconds: float) -> Any:
    return T0 + timedelta(seconds=seconds)


async def _seed(url: str) -> None:
    state = await open_state(url)
    try:
        for i in range(4):  # latencies 10, 20, 30, 40 s; waits 2, 4, 6, 8 s; runs 8, 16, 24, 32 s
            [job] = await sparkkit.create(state, "resize", 1, at(60 * i))
            started, finished = at(60 * i + 2 * (i + 1)), at(60 * i + 10 * (i + 1))
            await sparkkit.run(state, job, started=started, finished=finished)
        # Fails once, then 60 s latency; waits 3 s for its first attempt, the last one runs 30 s.
        [job] = await sparkkit.create(state, "resize", 1, at(600))
        await sparkkit.run(state, job, started=at(603), finished=at(605), fail_with="boom", retry_at=at(630))
        await sparkkit.run(state, job, started=at(630), finished=at(660))
        for started in (3601, 3603):  # two emails in hour 1, 5 s latency: waits 1 and 3 s, runs 4 and 2 s
            [mail] = await sparkkit.create(
                state, "send_email", 1, at(3600), input={"to": "a", "subject": "b"}
            )
            await sparkkit.run(state, mail, started=at(started), finished=at(3605))
        [stuck] = await sparkkit.create(state, "resize", 1, at(7200))  # pending again after a timeout
        await sparkkit.run(
            state,
            stuck,
            started=at(7205),  # waited 5 s; no run time (not completed)
            finished=at(7210),
            fail_with="timeout\nat line 3",
            retry_at=at(36000),
        )
        await sparkkit.create(state, "resize", 1, at(9000))  # never claimed: no wait time
    finally:
        await state.close()


def _triple(row: Any, name: str) -> tuple[float, float, float]:
    return (row[f"{name}_p50_s"], row[f"{name}_p95_s"], row[f"{name}_p99_s"])


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
    # Wait over the 6 claimed resize jobs (2, 3, 4, 5, 6, 8 s), run over the 5 completed ones
    # (8, 16, 24, 30, 32 s: the retried job counts its last attempt only). Nearest rank.
    assert _triple(resize, "wait") == (4, 8, 8)
    assert _triple(resize, "run") == (24, 32, 32)
    assert _triple(email, "wait") == (1, 3, 3)
    assert _triple(email, "run") == (2, 4, 4)
    assert report.notes == (ERRORS_NOTE,)  # the errors caveat always; no missing attempt times

    timing = {(r.type_name, r.period.hour): r for r in report.tables["timing"].itertuples()}
    assert set(timing) == {("resize", 0), ("send_email", 1), ("resize", 2)}
    hour0, hour1, hour2 = timing["resize", 0], timing["send_email", 1], timing["resize", 2]
    assert (hour0.waited, hour0.ran) == (5, 5)
    assert (hour0.wait_p50_s, hour0.wait_p95_s, hour0.wait_p99_s) == (4, 8, 8)  # 2, 3, 4, 6, 8
    assert (hour0.run_p50_s, hour0.run_p95_s, hour0.run_p99_s) == (24, 32, 32)
    assert (hour1.waited, hour1.wait_p50_s, hour1.wait_p99_s) == (2, 1, 3)
    assert (hour1.ran, hour1.run_p50_s, hour1.run_p99_s) == (2, 2, 4)
    assert (hour2.waited, hour2.wait_p50_s, hour2.ran) == (1, 5, 0)  # the 9000 s job never ran
    assert pd.isna(hour2.run_p50_s)

    throughput = report.tables["throughput"]
    rows = {
        (r.type_name, r.period.hour): (r.started, r.completed, r.with_failure, r.backlog)
        for r in throughput.itertuples()
    }
    # The retried job failed at +605 (hour 0) and completed; the stuck one failed at +7210 (hour 2).
    assert rows == {
        ("resize", 0): (5, 5, 1, 0),
        ("send_email", 1): (2, 2, 0, 0),
        ("resize", 2): (2, 0, 1, 2),
    }
    assert throughput["throughput_per_hour"].max() == 5

    attempts = {(r.type_name, r.attempt): r.jobs for r in report.tables["attempts"].itertuples()}
    assert attempts == {("resize", 1): 5, ("resize", 2): 1, ("send_email", 1): 2}
    # Only the stuck job keeps an error (the retried one's was cleared by its success, and these
    # failures were recorded without an error history): a plain two-line message, grouped on
    # its first line, with no exception type.
    errors = [
        (r.type_name, r.error_type, r.fingerprint, r.example, r.jobs, r.attempts, r.messages)
        for r in report.tables["errors"].itertuples()
    ]
    assert errors == [("resize", "", "timeout", "timeout", 1, 1, 1)]
    statuses = {(r.chain_type, r.status): r.chains for r in report.tables["chains_by_status"].itertuples()}
    assert statuses == {("resize", "completed"): 5, ("resize", "pending"): 2, ("send_email", "completed"): 2}

    durations = report.tables["chain_durations"].set_index("chain_type")
    assert (durations.loc["resize", "chains"], durations.loc["resize", "completed"]) == (7, 5)
    assert _triple(durations.loc["resize"], "duration") == (30, 60, 60)  # one-job chains: the latencies
    steps = report.tables["chain_steps"].set_index(["chain_type", "step", "type_name"])
    first = steps.loc[("resize", 1, "resize")]
    assert (first["jobs"], first["completed"]) == (7, 5)
    assert (first["latency_p50_s"], first["wait_p50_s"], first["run_p50_s"]) == (30, 4, 24)

    html_path = write_report(report, tmp_path / "out")
    html = html_path.read_text()
    assert "Wait and run time per hour" in html
    assert "attempt start times" not in html
    assert "including attempts that later succeeded" in html
    for section in ("Dead letters", "Cancellations per hour", "Failures caused by blockers"):
        assert f"<h2>{section}</h2>" in html
    headings = re.findall(r"<th[^>]*>([^<]*)</th>", html)
    assert {"Latency", "Job type", "Oldest pending age", "p99"} <= set(headings)
    assert not [h for h in headings if "_" in h], "raw column names on the page"
    cells = re.findall(r"<td[^>]*>([^<]*)</td>", html)
    assert not {"NaT", "nan", "NaN", "None", ""} & set(cells), "a missing value shown raw"
    assert "—" in cells  # send_email has no pending job: its oldest pending age is missing
    assert "<td class='num'>1 h</td>" in html  # the oldest pending job's age (3,600 s), formatted
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


async def _seed_for_archive(url: str) -> None:
    """Three chains completed on days 0-2 (to archive), two on day 25 (kept live)."""
    state = await open_state(url)
    try:
        for d in range(3):  # 100 s latency each
            created = T0 + timedelta(days=d)
            [job] = await sparkkit.create(state, "resize", 1, created)
            await sparkkit.run(
                state, job, started=created + timedelta(seconds=50), finished=created + timedelta(seconds=100)
            )
        live = T0 + timedelta(days=25)
        for offset, wait, run in ((0, 10, 30), (3600, 20, 60)):
            [job] = await sparkkit.create(state, "resize", 1, live + timedelta(seconds=offset))
            started = live + timedelta(seconds=offset + wait)
            await sparkkit.run(state, job, started=started, finished=started + timedelta(seconds=run))
    finally:
        await state.close()


def _strip_attempt_times(spark: Any, root: Path) -> None:
    """Rewrite the archived jobs as an archive written before attempt start times existed."""
    jobs = root / "jobs"
    old = spark.read.parquet(str(jobs)).drop("first_attempt_at", "attempt_started_at")
    old.write.partitionBy("completed_date", "chain_type", "run_id").parquet(str(root / "jobs_old"))
    shutil.rmtree(jobs)
    (root / "jobs_old").rename(jobs)
    assert "first_attempt_at" not in spark.read.parquet(str(jobs)).columns


def test_report_over_an_archive_written_before_attempt_start_times(
    spark: Any, sqlite_url: str, tmp_path: Path
) -> None:
    asyncio.run(_seed_for_archive(sqlite_url))
    now = T0 + timedelta(days=30)
    root = tmp_path / "archive"
    result = archive(spark, url=sqlite_url, to=str(root), older_than=timedelta(days=10), now=now)
    assert (result.jobs, result.deleted) == (3, 3)
    _strip_attempt_times(spark, root)

    report = build_report(spark, url=sqlite_url, archive=str(root), period="day", now=now)
    resize = report.tables["summary"].set_index("type_name").loc["resize"]
    assert (resize["jobs"], resize["completed"]) == (5, 5)
    assert (resize["latency_p50_s"], resize["latency_p99_s"]) == (100, 100)  # 100, 100, 100, 40, 80
    assert _triple(resize, "wait") == (10, 20, 20)  # the two live jobs only
    assert _triple(resize, "run") == (30, 60, 60)
    assert report.notes == (
        "3 of 5 claimed jobs have no attempt start times (claimed before the state tables recorded "
        "them, or archived before the archive kept them); wait and run times leave them out",
        ERRORS_NOTE,
    )
    timing = {(r.type_name, r.period.day): (r.waited, r.ran) for r in report.tables["timing"].itertuples()}
    assert timing == {("resize", 26): (2, 2)}  # 2024-03-26: day 25 after T0


def test_report_rejects_an_unknown_period(spark: Any, sqlite_url: str) -> None:
    with pytest.raises(SparkOptionError, match="period"):
        build_report(spark, url=sqlite_url, period="fortnight")
