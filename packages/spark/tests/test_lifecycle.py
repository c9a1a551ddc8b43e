"""The job lifecycle in Spark: failed and cancelled jobs read, reported and archived, on a
seeded history with known numbers, on SQLite and PostgreSQL.

The history (seconds after T0; ``sparkkit`` drives the state adapter's own operations):

====  ============  =======  ===================================================  ==========
job   type          created  what happens                                          ends as
====  ============  =======  ===================================================  ==========
A     resize        0        ValueError at 20 (retry at 100), ValueError at 110,   failed
                             no attempts left
D1    notify_step   5        blocked by A: fails with it at 110                    failed
B     resize        60       FailJob at 75                                         failed
D3    notify_step   65       blocked by B, runs after failed blockers: pending     pending
                             from 75
C     resize        120      JobTimeoutError at 140 (retry at 200), done at 230    completed
E2    send_email    3600     claimed at 3602, cancelled at 3700 (no reason)        cancelled
E1    send_email    3605     cancelled at 3700, reason "user left"                 cancelled
D2    notify_step   3610     blocked by E1: fails when it is cancelled, at 3700    failed
G     resize        7200     claimed at 7205, done at 7210                         completed
F     resize        7300     never claimed                                         pending
H     resize        7400     failed by an operator at 7500 (a traceback, no        failed
                             error history)
====  ============  =======  ===================================================  ==========
"""

from __future__ import annotations

import asyncio
import json
import math
import re
import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import sparkkit

from jobchain import JobTypes, connect
from jobchain.connect_backends import open_state
from jobchain.contracts.state import JobsReapExpired
from jobchain.entities import AttemptError, Job
from jobchain_spark import SchemaVersionError, attempt_errors, read_table
from jobchain_spark.archive import archive, read_archive
from jobchain_spark.report import Report, build_report

pytestmark = [pytest.mark.spark, pytest.mark.timeout(900)]

T0 = sparkkit.T0
OLD_ID = "01900000-0000-7000-8000-000000000001"
H_ERROR = "Traceback (most recent call last):\n  File \"app.py\", line 3, in resize\nKeyError: 'img'"


def at(seconds: float) -> datetime:
    start: datetime = T0
    return start + timedelta(seconds=seconds)


async def _seed(url: str) -> dict[str, Job]:
    """The history of the module docstring; returns its jobs by letter."""
    state = await open_state(url)
    run = sparkkit.run
    try:
        [a] = await sparkkit.create(state, "resize", 1, at(0))
        [d1] = await sparkkit.create(state, "notify_step", 1, at(5), blockers=(a.id,))
        await run(state, a, started=at(10), finished=at(20), fail_with="bad input", error_type="ValueError",
                  retry_at=at(100))  # fmt: skip
        [b] = await sparkkit.create(state, "resize", 1, at(60))
        [d3] = await sparkkit.create(
            state, "notify_step", 1, at(65), blockers=(b.id,), runs_after_failed_blockers=True
        )
        await run(state, b, started=at(70), finished=at(75), fail_with="no such image", error_type="FailJob",
                  give_up=True)  # fmt: skip
        await run(state, a, started=at(100), finished=at(110), fail_with="bad input", error_type="ValueError",
                  give_up=True)  # fmt: skip
        [c] = await sparkkit.create(state, "resize", 1, at(120))
        await run(state, c, started=at(130), finished=at(140), fail_with="handler ran past 5 s",
                  error_type="JobTimeoutError", retry_at=at(200))  # fmt: skip
        await run(state, c, started=at(200), finished=at(230))
        email = {"to": "a", "subject": "b"}
        [e2] = await sparkkit.create(state, "send_email", 1, at(3600), input=email)
        await sparkkit.claim(state, e2, at=at(3602))
        [e1] = await sparkkit.create(state, "send_email", 1, at(3605), input=email)
        [d2] = await sparkkit.create(state, "notify_step", 1, at(3610), blockers=(e1.id,))
        await sparkkit.cancel(state, [e1.id], at=at(3700), reason="user left")
        await sparkkit.cancel(state, [e2.id], at=at(3700))
        [g] = await sparkkit.create(state, "resize", 1, at(7200))
        await run(state, g, started=at(7205), finished=at(7210))
        [f] = await sparkkit.create(state, "resize", 1, at(7300))
        [h] = await sparkkit.create(state, "resize", 1, at(7400))
        await sparkkit.fail(state, h, at=at(7500), error=H_ERROR)
    finally:
        await state.close()
    return {"A": a, "B": b, "C": c, "D1": d1, "D2": d2, "D3": d3, "E1": e1, "E2": e2, "F": f, "G": g, "H": h}


async def _listed(url: str) -> dict[str, Job]:
    client = await connect(url, notify="none", job_types=JobTypes())
    try:
        jobs: dict[str, Job] = {}
        cursor = None
        while True:
            page = await client.list_jobs(cursor=cursor, limit=500)
            jobs.update((j.id, j) for j in page.items)
            cursor = page.next_cursor
            if cursor is None:
                return jobs
    finally:
        await client.close()


def _utc(value: datetime | None) -> datetime | None:
    # PySpark's collect() gives a timestamp as a naive datetime in this process's local time
    # zone (TZ), not in UTC: astimezone reads it so, whatever TZ the test process runs in.
    return None if value is None else value.astimezone(UTC)


@pytest.fixture(scope="module")
def history(module_state_url: str) -> tuple[str, dict[str, Job]]:
    """The history of the module docstring, seeded once per backend for the tests that only read it."""
    return module_state_url, asyncio.run(_seed(module_state_url))


@pytest.fixture(scope="module")
def report(spark: Any, history: Any) -> Report:
    """The report over ``history``, built once per backend: its figures are asserted below, and
    the archive test compares its report over an archived copy of the same history with it."""
    url, _ = history
    return build_report(spark, url=url, period="hour", now=at(3 * 3600))


@pytest.fixture
def own_history(module_state_url: str, request: pytest.FixtureRequest) -> Any:
    """The same history in a state of this test alone, on the backend of ``module_state_url``."""
    backend = "sqlite" if module_state_url.startswith("sqlite") else "postgres"
    url = str(request.getfixturevalue(f"{backend}_url"))
    return url, asyncio.run(_seed(url))


def test_the_reader_reads_failed_and_cancelled_jobs_as_the_client_lists_them(
    spark: Any, history: Any
) -> None:
    url, seeded = history
    ids = {job.id: name for name, job in seeded.items()}
    rows = {r["id"]: r for r in read_table(spark, url, partitions=2).collect()}
    listed = asyncio.run(_listed(url))
    assert set(rows) == set(listed) == set(ids)
    for job_id, job in listed.items():
        row = rows[job_id]
        assert row["status"] == job.status.value, ids[job_id]
        assert (row["attempt"], row["attempt_base"], row["runs_after_failed_blockers"]) == (
            job.attempt,
            job.attempt_base,
            job.runs_after_failed_blockers,
        )
        assert (_utc(row["failed_at"]), _utc(row["cancelled_at"])) == (job.failed_at, job.cancelled_at)
        assert (row["cancel_reason"], row["failed_by_chain_id"]) == (
            job.cancel_reason,
            job.failed_by_chain_id,
        )
        stored = json.loads(row["attempt_errors"]) if row["attempt_errors"] is not None else []
        assert tuple(AttemptError.from_json(e) for e in stored) == job.attempt_errors, ids[job_id]
    by_name = {name: rows[job.id] for name, job in seeded.items()}
    statuses = {name: row["status"] for name, row in by_name.items()}
    assert statuses == {
        "A": "failed", "B": "failed", "C": "completed", "D1": "failed", "D2": "failed", "D3": "pending",
        "E1": "cancelled", "E2": "cancelled", "F": "pending", "G": "completed", "H": "failed",
    }  # fmt: skip
    assert (_utc(by_name["A"]["failed_at"]), _utc(by_name["D1"]["failed_at"])) == (at(110), at(110))
    assert by_name["D1"]["failed_by_chain_id"] == seeded["A"].id
    assert by_name["D2"]["failed_by_chain_id"] == seeded["E1"].id
    assert (by_name["E1"]["cancel_reason"], _utc(by_name["E1"]["cancelled_at"])) == ("user left", at(3700))
    assert by_name["D3"]["runs_after_failed_blockers"] is True
    assert by_name["C"]["runs_after_failed_blockers"] is False

    # One row per history entry: A 2 (ValueError), B 1, C 1 (kept after its success), D1 and D2
    # one each (their blocker's end); H was failed without one.
    entries = attempt_errors(read_table(spark, url), "id").collect()
    per_type: dict[str, int] = {}
    for entry in entries:
        per_type[entry["error_type"]] = per_type.get(entry["error_type"], 0) + 1
    assert per_type == {
        "ValueError": 2, "FailJob": 1, "JobTimeoutError": 1,
        "BlockerChainFailed": 1, "BlockerChainCancelled": 1,
    }  # fmt: skip
    [timeout] = [e for e in entries if e["error_type"] == "JobTimeoutError"]
    assert (timeout["id"], timeout["attempt"], timeout["worker_id"]) == (seeded["C"].id, 1, "w1")
    assert (timeout["message"], _utc(timeout["at"])) == ("handler ran past 5 s", at(140))

    chains = {r["id"]: r for r in read_table(spark, url, "chains", partitions=2).collect()}
    a_chain, e1_chain, g_chain = chains[seeded["A"].id], chains[seeded["E1"].id], chains[seeded["G"].id]
    assert (a_chain["status"], _utc(a_chain["finished_at"]), a_chain["completed_at"]) == (
        "failed",
        at(110),
        None,
    )
    assert a_chain["last_attempt_error"] == "bad input"
    assert (e1_chain["status"], _utc(e1_chain["finished_at"]), e1_chain["cancel_reason"]) == (
        "cancelled",
        at(3700),
        "user left",
    )
    assert (_utc(g_chain["finished_at"]), _utc(g_chain["completed_at"])) == (at(7210), at(7210))
    assert chains[seeded["F"].id]["finished_at"] is None
    assert chains[seeded["D2"].id]["failed_by_chain_id"] == seeded["E1"].id

    failed = read_table(spark, url, statuses=["failed", "cancelled"], partitions=1)
    assert failed.count() == 7


def test_the_rescue_record_is_read(spark: Any, sqlite_url: str) -> None:
    async def seed() -> Job:
        state = await open_state(sqlite_url)
        try:
            [job] = await sparkkit.create(state, "resize", 1, at(0))
            await sparkkit.claim(state, job, at=at(10))  # a one-hour lease, never renewed
            async with state.transaction() as tx:
                [reaped] = await tx.jobs_reap_expired(JobsReapExpired(type_names=["resize"], now=at(3700)))
            return reaped
        finally:
            await state.close()

    reaped = asyncio.run(seed())
    [row] = read_table(spark, sqlite_url, partitions=1).collect()
    assert (row["status"], row["rescued_from"], row["rescue_reason"]) == ("pending", "w1", "lease_expired")
    assert _utc(row["rescued_at"]) == at(3700) == reaped.rescued_at
    [entry] = attempt_errors(read_table(spark, sqlite_url, partitions=1)).collect()
    assert (entry["error_type"], entry["attempt"], entry["worker_id"]) == ("AttemptAbandoned", 1, "w1")


def _migrate_sqlite_to(path: Path, last: str) -> None:
    """Apply jobchain-sqlite's migrations up to ``last`` by hand, as an older version did."""
    from jobchain_sqlite.queries import MIGRATIONS, migration_statements, queries

    q = queries("jobchain_")
    with sqlite3.connect(path) as conn:
        conn.execute(q.migration_table_create)
        for name in MIGRATIONS[: MIGRATIONS.index(last) + 1]:
            for statement in migration_statements(name, "jobchain_"):
                conn.execute(statement)
            conn.execute(q.migration_record, {"name": name, "applied_at": "2024-01-01T00:00:00.000000Z"})
    conn.close()


def test_a_schema_older_than_the_lifecycle_is_refused_until_migrated(spark: Any, tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    url = f"sqlite:///{path}"
    _migrate_sqlite_to(path, "0004_worker_registry")
    with sqlite3.connect(path) as conn:  # a row written by the previous version
        conn.execute(
            "INSERT INTO jobchain_job (id, type_name, chain_id, chain_type_name, chain_index, status, "
            "created_at, scheduled_at) VALUES (?, 'resize', ?, 'resize', 0, 'pending', ?, ?)",
            [OLD_ID, OLD_ID, "2024-03-01T00:00:00.000000Z", "2024-03-01T00:00:00.000000Z"],
        )
    conn.close()
    lifecycle = (
        "attempt_errors",
        "attempt_base",
        "failed_at",
        "cancelled_at",
        "cancel_reason",
        "failed_by_chain_id",
        "runs_after_failed_blockers",
    )
    with pytest.raises(SchemaVersionError, match=r"lacks column\(s\) attempt_errors, attempt_base") as err:
        read_table(spark, url)
    assert err.value.missing == lifecycle
    assert "0005_job_lifecycle" in str(err.value)
    assert "jobchain migrate --state URL" in str(err.value)
    # The data source itself refuses it when Spark plans the read, with the same message.
    with pytest.raises(Exception, match="SchemaVersionError"):
        spark.read.format("jobchain").option("url", url).load().collect()

    asyncio.run(sparkkit.migrate(url))  # the upgrade: the row reads with the lifecycle defaults
    [row] = read_table(spark, url, partitions=1).collect()
    assert (row["id"], row["status"], row["attempt_base"], row["attempt_errors"]) == (
        OLD_ID,
        "pending",
        0,
        None,
    )
    assert row["runs_after_failed_blockers"] is False

    empty = tmp_path / "empty.db"
    sqlite3.connect(empty).close()
    with pytest.raises(SchemaVersionError, match="no job table 'jobchain_job'"):
        read_table(spark, f"sqlite:///{empty}")


def _rows(frame: pd.DataFrame, *columns: str) -> list[tuple[Any, ...]]:
    return [tuple(r) for r in frame[list(columns)].itertuples(index=False)]


def test_report_lifecycle_figures_on_a_known_history(report: Report) -> None:
    t = report.tables
    summary = t["summary"].set_index("type_name")
    got = {
        name: tuple(int(row[c]) for c in ("jobs", "completed", "failed", "cancelled", "failed_by_blocker"))
        for name, row in summary.iterrows()
    }
    assert got == {"resize": (6, 2, 3, 0, 0), "notify_step": (3, 0, 2, 0, 2), "send_email": (2, 0, 0, 2, 0)}
    assert math.isclose(summary.loc["resize", "failure_rate"], 3 / 5)
    assert summary.loc["notify_step", "failure_rate"] == 1.0
    assert pd.isna(summary.loc["send_email", "failure_rate"])  # nothing ran to an end
    assert (summary.loc["resize", "attempted"], summary.loc["resize", "retried"]) == (4, 2)

    throughput = {
        (r.type_name, r.period.hour): (r.started, r.completed, r.failed, r.cancelled, r.backlog)
        for r in t["throughput"].itertuples()
    }
    assert throughput == {
        ("resize", 0): (3, 1, 2, 0, 0),
        ("resize", 2): (3, 1, 1, 0, 1),
        ("notify_step", 0): (2, 0, 1, 0, 1),
        ("notify_step", 1): (1, 0, 1, 0, 1),
        ("send_email", 1): (2, 0, 0, 2, 0),
    }

    assert _rows(t["dead_letters"], "type_name", "error_type", "jobs", "by_blocker", "retried") == [
        ("notify_step", "BlockerChainCancelled", 1, 1, 0),
        ("notify_step", "BlockerChainFailed", 1, 1, 0),
        ("resize", "FailJob", 1, 0, 0),
        ("resize", "KeyError", 1, 0, 0),  # no history: the exception line of its traceback
        ("resize", "ValueError", 1, 0, 1),
    ]
    letters = t["dead_letters"].set_index(["type_name", "error_type"])
    assert letters.loc[("resize", "ValueError"), "last_error"] == "bad input"
    assert letters.loc[("resize", "KeyError"), "last_error"] == "KeyError: 'img'"  # not the traceback
    assert pd.Timestamp(letters.loc[("resize", "FailJob"), "last_failed_at"]) == pd.Timestamp(
        at(75)
    ).tz_localize(None)

    assert _rows(t["cancellations"], "type_name", "cancelled", "claimed", "with_reason") == [
        ("send_email", 2, 1, 1)
    ]
    assert t["cancellations"]["period"].iloc[0] == pd.Timestamp(at(3600)).tz_localize(None)
    assert _rows(t["blocker_failures"], "type_name", "blocker_chain_type", "blocker_status", "jobs") == [
        ("notify_step", "resize", "failed", 1),
        ("notify_step", "send_email", "cancelled", 1),
    ]

    # Top errors count every kept failed attempt, the one C's success followed too; blocker
    # entries are not attempts; H (no history) counts by its last error, as before.
    assert _rows(t["errors"], "type_name", "error_type", "example", "jobs", "attempts", "messages") == [
        ("resize", "ValueError", "ValueError: bad input", 1, 2, 1),
        ("resize", "FailJob", "FailJob: no such image", 1, 1, 1),
        ("resize", "JobTimeoutError", "JobTimeoutError: handler ran past 5 s", 1, 1, 1),
        ("resize", "KeyError", "KeyError: 'img'", 1, 0, 1),
    ]
    assert list(t["errors"]["fingerprint"]) == [
        "ValueError: bad input",
        "FailJob: no such image",
        "JobTimeoutError: handler ran past <n> s",
        "KeyError: '<v>'",
    ]
    statuses = {(r.chain_type, r.status): r.chains for r in t["chains_by_status"].itertuples()}
    assert statuses == {
        ("notify_step", "failed"): 2, ("notify_step", "pending"): 1, ("resize", "completed"): 2,
        ("resize", "failed"): 3, ("resize", "pending"): 1, ("send_email", "cancelled"): 2,
    }  # fmt: skip
    durations = t["chain_durations"].set_index("chain_type")
    assert _rows(durations.reset_index(), "chain_type", "chains", "completed", "failed", "cancelled") == [
        ("notify_step", 3, 0, 2, 0),
        ("resize", 6, 2, 3, 0),
        ("send_email", 2, 0, 0, 2),
    ]


def test_archive_takes_failed_and_cancelled_chains_and_the_report_still_counts_them(
    spark: Any, history: Any, own_history: Any, report: Report, tmp_path: Path
) -> None:
    # The history is archived and deleted: this test seeds its own. ``report`` is the report
    # over the same history before any archive, on this backend; the two seedings differ in
    # their ids only, which the report's texts name (a blocker's chain): read them as ours.
    url, seeded = own_history
    now = T0 + timedelta(days=30)
    ours = {history[1][name].id: job.id for name, job in seeded.items()}
    before = {name: _renamed(frame, ours) for name, frame in report.tables.items()}
    root = str(tmp_path / "archive")
    every = ("completed", "cancelled", "failed")  # failed chains (dead letters) go only when named
    result = archive(spark, url=url, to=root, older_than=timedelta(days=10), now=now, statuses=every)
    # Every finished chain but B, which still blocks D3 (pending): A, C, G, H, D1, D2, E1, E2;
    # the blocker rows of D1 (on A) and D2 (on E1) go with them.
    assert (result.chains, result.jobs, result.blockers, result.deleted, result.retained) == (8, 8, 2, 8, 0)
    live = {r["id"] for r in read_table(spark, url, "chains").collect()}
    assert live == {seeded[n].id for n in ("B", "D3", "F")}
    archived = read_archive(spark, root, "chains")
    assert archived is not None
    by_status = {r["status"]: r["count"] for r in archived.groupBy("status").count().collect()}
    assert by_status == {"completed": 2, "failed": 4, "cancelled": 2}
    jobs = read_archive(spark, root, "jobs")
    assert jobs is not None
    e1 = jobs.where(jobs.id == seeded["E1"].id).first()
    assert e1 is not None
    assert (e1["cancel_reason"], e1["completed_date"].isoformat()) == ("user left", "2024-03-01")
    assert jobs.where(jobs.attempt_errors.isNotNull()).count() == 4  # A, C, D1, D2 (B stays live)

    again = archive(spark, url=url, to=root, older_than=timedelta(days=10), now=now, statuses=every)
    assert (again.chains, again.deleted) == (0, 0)

    # ``before`` was computed at another ``now``: no table compared here depends on it (only
    # the summary's oldest pending age does, which is left out).
    after = build_report(spark, url=url, archive=root, period="hour", now=now)
    for name in ("dead_letters", "cancellations", "blocker_failures", "chains_by_status", "errors"):
        pd.testing.assert_frame_equal(after.tables[name], before[name], check_dtype=False, obj=name)
    columns = ["type_name", "jobs", "completed", "failed", "cancelled", "failure_rate"]
    pd.testing.assert_frame_equal(after.tables["summary"][columns], before["summary"][columns])


def _renamed(frame: pd.DataFrame, ids: dict[str, str]) -> pd.DataFrame:
    """``frame`` with every job id of ``ids`` in its text columns replaced by its image."""
    pattern = "|".join(ids)
    frame = frame.copy()
    for column in frame.columns:
        if frame[column].map(lambda v: isinstance(v, str)).any():
            frame[column] = frame[column].map(
                lambda v: re.sub(pattern, lambda m: ids[m.group(0)], v) if isinstance(v, str) else v
            )
    return frame
