"""Report: throughput, latency, attempts, retries, errors and backlog per job type and period.

The input is the live ``jobs`` and ``chains`` tables plus, optionally, the Parquet archive
(verified runs only); a job present in both (archived, deletion not yet finished) counts
once. Percentiles are nearest-rank (``percentile_approx`` with accuracy 10,000: exact for
groups of up to 10,000 values, within 0.01% of rank beyond).

Times and their definitions:

- ``latency``: created → completed, over completed jobs.
- ``wait``: created → first attempt (``first_attempt_at``: the first claim by a worker), over
  every job that was claimed at least once, whatever its status now.
- ``run``: start of the last attempt (``attempt_started_at``: its claim) → completed, over
  completed jobs that a worker claimed. A job completed without ever being claimed has no
  run time.
- ``retry delay``: last failed attempt → completion, over completed jobs that were retried.
- ``chain duration``: root job created → last job completed, over completed chains (see
  :mod:`jobchain_spark.report_chains` for the chain tables).

The ``throughput`` table counts per job type and period the jobs ``started`` (created),
``completed``, ``failed`` (by ``failed_at``), ``cancelled`` (by ``cancelled_at``),
``with_failure`` (jobs whose last failed attempt ended in the period) and ``backlog`` (jobs
created but not finished at the end of the period: blocked, pending or running). The period
is ``minute``, ``hour``, ``day`` or whole minutes that divide a day, such as ``15m``
(:mod:`jobchain_spark.report_periods`). Top errors are grouped by exception type and a
fingerprint of the message with its values masked (:mod:`jobchain_spark.report_errors`,
which says what is and is not counted).

The lifecycle figures (:mod:`jobchain_spark.report_lifecycle`): the ``summary`` table's
``failed``, ``cancelled``, ``failed_by_blocker`` and ``failure_rate`` (failed ÷ (completed +
failed): the share of jobs that ran to an end and did not succeed; cancelled jobs are left
out), and the ``dead_letters``, ``cancellations`` and ``blocker_failures`` tables. A job counts
in its present status: one failed and then retried is not a dead letter any more.

The ``summary`` table has the percentiles per job type; the ``timing`` table has ``wait`` and
``run`` per job type and period, wait in the period the job was created, run in the period it
completed (as ``throughput`` counts started and completed jobs). The attempt start times are
recorded by jobchain-sqlite migration ``0002_attempt_start`` and jobchain-postgres migration
``0003_attempt_start`` on; jobs claimed earlier, and archives written before, have none and
are left out of these figures (the report says how many).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Final

import pandas as pd

from jobchain.url import mask_url
from jobchain_spark.archive import read_archive
from jobchain_spark.report_chains import chain_durations, chain_steps
from jobchain_spark.report_errors import ERRORS_NOTE, signature_udf, top_errors
from jobchain_spark.report_lifecycle import blocker_failures, cancellations, dead_letters, finished_per_period
from jobchain_spark.report_periods import NAMED, Period, parse_period
from jobchain_spark.source import read_table

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

PERIODS: Final = NAMED
"""The named periods; ``period`` also takes whole minutes that divide a day (``5m``, ``15m``:
:mod:`jobchain_spark.report_periods`)."""
QUANTILES: Final = (0.5, 0.95, 0.99)
ACCURACY: Final = 10_000


@dataclass(frozen=True)
class Report:
    """The computed tables (pandas), keyed by name, plus how they were computed."""

    tables: dict[str, pd.DataFrame]
    period: str
    """The period's canonical text: ``minute``, ``hour``, ``day``, ``15m``, ``2h``."""
    generated_at: datetime
    sources: tuple[str, ...]
    notes: tuple[str, ...] = field(default_factory=tuple)


def _union(live: DataFrame, archived: DataFrame | None) -> DataFrame:
    """Live rows plus archived rows not live any more, in the live columns.

    Archive files written by an older version lack newer columns (``first_attempt_at``,
    ``attempt_started_at``): those read as null. A row in both (archived, deletion not yet
    finished) is taken from the live table, which has every column.
    """
    if archived is None:
        return live
    shared = [c for c in live.columns if c in archived.columns]
    older = archived.select(*shared).join(live.select("id"), "id", "left_anti")
    return live.unionByName(older, allowMissingColumns=True).select(*live.columns)


def _seconds(later: Column, earlier: Column) -> Column:
    return later.cast("double") - earlier.cast("double")


def _percentiles(df: DataFrame, value: Column, name: str, *by: str | Column) -> DataFrame:
    """p50/p95/p99 of ``value`` (seconds) per ``type_name`` and ``by``; nulls are left out."""
    from pyspark.sql import functions as sf

    q = sf.percentile_approx(value, list(QUANTILES), ACCURACY)
    return df.groupBy("type_name", *by).agg(
        q[0].alias(f"{name}_p50_s"), q[1].alias(f"{name}_p95_s"), q[2].alias(f"{name}_p99_s")
    )


def _timing(jobs: DataFrame, done: DataFrame, period: Period) -> DataFrame:
    """Wait and run percentiles per job type and period (wait by creation, run by completion)."""
    from pyspark.sql import functions as sf

    claimed = jobs.where(sf.col("first_attempt_at").isNotNull())
    ran = done.where(sf.col("attempt_started_at").isNotNull())
    created = period.start("created_at").alias("period")
    completed = period.start("completed_at").alias("period")
    waits = _period_durations(claimed, created, "created_at", "first_attempt_at", "wait", "waited")
    runs = _period_durations(ran, completed, "attempt_started_at", "completed_at", "run", "ran")
    return (
        waits.join(runs, ["type_name", "period"], "full_outer")
        .fillna(0, ["waited", "ran"])
        .select(
            "type_name",
            "period",
            "waited",
            *[f"wait_p{q}_s" for q in (50, 95, 99)],
            "ran",
            *[f"run_p{q}_s" for q in (50, 95, 99)],
        )
        .orderBy("type_name", "period")
    )


def _period_durations(
    frame: DataFrame, period: Column, since: str, until: str, name: str, count: str
) -> DataFrame:
    """Per job type and ``period``: how many rows, and the ``name`` percentiles of ``until - since``."""
    from pyspark.sql import functions as sf

    return (
        frame.groupBy("type_name", period)
        .agg(sf.count(sf.lit(1)).alias(count))
        .join(
            _percentiles(frame, _seconds(sf.col(until), sf.col(since)), name, period), ["type_name", "period"]
        )
    )


def _attempt_time_notes(jobs: DataFrame) -> list[str]:
    """Say when claimed jobs lack attempt start times (claimed before they were recorded)."""
    from pyspark.sql import functions as sf

    row = jobs.agg(
        sf.count(sf.when(sf.col("attempt") > 0, 1)).alias("claimed"),
        sf.count(sf.when((sf.col("attempt") > 0) & sf.col("first_attempt_at").isNull(), 1)).alias("missing"),
    ).first()
    claimed, missing = (int(row["claimed"]), int(row["missing"])) if row is not None else (0, 0)
    if not missing:
        return []
    return [
        f"{missing} of {claimed} claimed jobs have no attempt start times (claimed before the state "
        "tables recorded them, or archived before the archive kept them); wait and run times leave "
        "them out"
    ]


def _with_backlog(throughput: pd.DataFrame) -> pd.DataFrame:
    """Add ``backlog``: per job type, jobs started minus jobs finished (completed, failed or
    cancelled) up to each period's end.

    Every finished job was started (created) in the same or an earlier period, so the
    running difference is the number of jobs not finished at the end of the period.
    """
    frame = throughput.sort_values(["type_name", "period"], kind="stable").reset_index(drop=True)
    grouped = frame.groupby("type_name", sort=False)
    finished = grouped["completed"].cumsum() + grouped["failed"].cumsum() + grouped["cancelled"].cumsum()
    frame["backlog"] = (grouped["started"].cumsum() - finished).astype("int64")
    return frame


def build_report(
    spark: SparkSession,
    *,
    url: str,
    archive: str | None = None,
    period: str = "hour",
    now: datetime | None = None,
    partitions: int = 4,
) -> Report:
    """Compute every report table from the live tables at ``url`` and the archive at ``archive``.

    ``period`` is ``minute``, ``hour``, ``day`` or whole minutes that divide a day (``5m``,
    ``15m``, ``2h``); anything else raises SparkOptionError (option ``period``).
    """
    from pyspark.sql import functions as sf

    bucket = parse_period(period)
    when = now or datetime.now(UTC)
    jobs = read_table(spark, url, "jobs", partitions=partitions)
    chains = read_table(spark, url, "chains", partitions=partitions)
    sources = [mask_url(url)]
    if archive is not None:
        sources.append(archive)
        jobs = _union(jobs, read_archive(spark, archive, "jobs"))
        chains = _union(chains, read_archive(spark, archive, "chains"))
    jobs = jobs.persist()
    notes: list[str] = []
    done = jobs.where(sf.col("status") == "completed")
    seconds = bucket.seconds

    started = jobs.groupBy("type_name", bucket.start("created_at").alias("period")).agg(
        sf.count(sf.lit(1)).alias("started")
    )
    completed = done.groupBy("type_name", bucket.start("completed_at").alias("period")).agg(
        sf.count(sf.lit(1)).alias("completed")
    )
    failed = (
        jobs.where(sf.col("last_attempt_at").isNotNull())
        .groupBy("type_name", bucket.start("last_attempt_at").alias("period"))
        .agg(sf.count(sf.lit(1)).alias("with_failure"))
    )
    throughput = (
        started.join(completed, ["type_name", "period"], "full_outer")
        .join(finished_per_period(jobs, bucket.text), ["type_name", "period"], "full_outer")
        .join(failed, ["type_name", "period"], "full_outer")
        .fillna(0, ["started", "completed", "failed", "cancelled", "with_failure"])
        .withColumn("throughput_per_hour", sf.col("completed") * 3600.0 / seconds)
        .orderBy("type_name", "period")
    )

    summary = jobs.groupBy("type_name").agg(
        sf.count(sf.lit(1)).alias("jobs"),
        sf.count(sf.when(sf.col("status") == "completed", 1)).alias("completed"),
        sf.count(sf.when(sf.col("status") == "failed", 1)).alias("failed"),
        sf.count(sf.when(sf.col("status") == "cancelled", 1)).alias("cancelled"),
        sf.count(sf.when((sf.col("status") == "failed") & sf.col("failed_by_chain_id").isNotNull(), 1)).alias(
            "failed_by_blocker"
        ),
        sf.count(sf.when(sf.col("attempt") > 1, 1)).alias("retried"),
        sf.count(sf.when(sf.col("attempt") > 0, 1)).alias("attempted"),
        sf.min(sf.when(sf.col("status") == "pending", sf.col("created_at"))).alias(
            "oldest_pending_created_at"
        ),
    )
    ended = sf.col("completed") + sf.col("failed")
    summary = summary.withColumn(
        "retry_rate", sf.when(sf.col("attempted") > 0, sf.col("retried") / sf.col("attempted"))
    ).withColumn("failure_rate", sf.when(ended > 0, sf.col("failed") / ended))
    summary = summary.withColumn(
        "oldest_pending_age_s", _seconds(sf.lit(when), sf.col("oldest_pending_created_at"))
    )
    summary = summary.join(
        _percentiles(done, _seconds(sf.col("completed_at"), sf.col("created_at")), "latency"),
        "type_name",
        "left",
    )
    retried = done.where(sf.col("last_attempt_at").isNotNull())
    summary = summary.join(
        _percentiles(retried, _seconds(sf.col("completed_at"), sf.col("last_attempt_at")), "retry_delay"),
        "type_name",
        "left",
    )
    summary = summary.join(
        _percentiles(
            jobs.where(sf.col("first_attempt_at").isNotNull()),
            _seconds(sf.col("first_attempt_at"), sf.col("created_at")),
            "wait",
        ),
        "type_name",
        "left",
    )
    summary = summary.join(
        _percentiles(
            done.where(sf.col("attempt_started_at").isNotNull()),
            _seconds(sf.col("completed_at"), sf.col("attempt_started_at")),
            "run",
        ),
        "type_name",
        "left",
    )
    notes.extend(_attempt_time_notes(jobs))

    attempts = (
        jobs.where(sf.col("attempt") > 0)
        .groupBy("type_name", "attempt")
        .agg(sf.count(sf.lit(1)).alias("jobs"))
    ).orderBy("type_name", "attempt")
    notes.append(ERRORS_NOTE)
    by_status = (
        chains.groupBy(sf.col("type_name").alias("chain_type"), "status")
        .agg(sf.count(sf.lit(1)).alias("chains"))
        .orderBy("chain_type", "status")
    )
    tables = {
        "throughput": _with_backlog(throughput.toPandas()),
        "summary": summary.orderBy("type_name").toPandas(),
        "timing": _timing(jobs, done, bucket).toPandas(),
        "attempts": attempts.toPandas(),
        "errors": top_errors(jobs).toPandas(),
        "dead_letters": dead_letters(jobs, signature_udf()(sf.col("last_attempt_error"))).toPandas(),
        "cancellations": cancellations(jobs, bucket.text).toPandas(),
        "blocker_failures": blocker_failures(jobs, chains).toPandas(),
        "chains_by_status": by_status.toPandas(),
        "chain_durations": chain_durations(chains, QUANTILES, ACCURACY).toPandas(),
        "chain_steps": chain_steps(jobs, ACCURACY).toPandas(),
    }
    jobs.unpersist()
    return Report(
        tables=tables, period=bucket.text, generated_at=when, sources=tuple(sources), notes=tuple(notes)
    )


__all__ = ["PERIODS", "Report", "build_report"]
