"""Report tables of the job lifecycle: dead letters, cancellations, failures caused by blockers.

- ``dead_letters``: failed jobs (status ``failed``: attempts exhausted, failed on purpose, or
  failed because a blocker chain failed or was cancelled) per job type and error type. The
  error type is that of the last entry of the job's error history (``attempt_errors``):
  ``BlockerChainFailed`` / ``BlockerChainCancelled`` for a failure caused by a blocker,
  ``AttemptAbandoned`` for a job whose last attempts were abandoned; for a job without a
  history, the exception type of its ``last_attempt_error``, or ``""`` for a plain message.
- ``cancellations``: cancelled jobs per job type and period (by ``cancelled_at``), with how
  many had been claimed by a worker at least once and how many carry a reason.
- ``blocker_failures``: jobs failed because a blocker chain failed or was cancelled, per job
  type and the blocker chain's type and status (as the chain is now: a retried blocker chain
  shows its new status; one no longer in the history shows ``(deleted)``).

A job counts in its present status: a failed job that was retried (``client.retry_job``) is
not a dead letter any more, and its earlier failure no longer counts in the failure rate.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from jobchain_spark.report_periods import parse_period
from jobchain_spark.tables import ATTEMPT_ERRORS_SCHEMA

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

MAX_ERROR: Final = 200
"""Characters of an error message shown in a table (the stored history keeps 2,000)."""
DELETED: Final = "(deleted)"
"""The blocker chain type and status shown for a blocker chain in neither the live tables nor
the archive."""


def history(column: str = "attempt_errors") -> Column:
    """The parsed error history (an array of structs; null when the job has none)."""
    from pyspark.sql import functions as sf

    return sf.from_json(sf.col(column), ATTEMPT_ERRORS_SCHEMA)


def last_entry(field: str) -> Column:
    """``field`` of the last entry of the error history, null when it is empty."""
    from pyspark.sql import functions as sf

    entries = history()
    # Guarded: element_at on an empty array raises under ANSI mode (Spark 4's default).
    return sf.when(sf.size(entries) > 0, sf.element_at(entries, -1)[field])


def dead_letters(jobs: DataFrame, signature: Column) -> DataFrame:
    """Failed jobs per job type and error type (see module doc).

    ``signature`` is ``struct<error_type, error>`` parsed from ``last_attempt_error``, used for
    a job without an error history. Columns: ``type_name``, ``error_type``, ``jobs``,
    ``by_blocker`` (failed because a blocker chain failed or was cancelled), ``retried``
    (more than one attempt used), ``first_failed_at``, ``last_failed_at``, ``last_error``
    (the latest such failure's message, its first line, at most 200 characters; for a job
    without a history, the exception line of its stored error).
    """
    from pyspark.sql import functions as sf

    failed = jobs.where(sf.col("status") == "failed")
    first_line = sf.substring(sf.substring_index(last_entry("message"), "\n", 1), 1, MAX_ERROR)
    message = sf.coalesce(first_line, signature["error"])
    error_type = sf.coalesce(last_entry("error_type"), signature["error_type"], sf.lit(""))
    used = sf.col("attempt") - sf.coalesce(sf.col("attempt_base"), sf.lit(0))
    return (
        failed.select(
            "type_name",
            error_type.alias("error_type"),
            message.alias("message"),
            sf.col("failed_by_chain_id").isNotNull().alias("by_blocker"),
            (used > 1).alias("retried"),
            "failed_at",
        )
        .groupBy("type_name", "error_type")
        .agg(
            sf.count(sf.lit(1)).alias("jobs"),
            sf.count(sf.when(sf.col("by_blocker"), 1)).alias("by_blocker"),
            sf.count(sf.when(sf.col("retried"), 1)).alias("retried"),
            sf.min("failed_at").alias("first_failed_at"),
            sf.max("failed_at").alias("last_failed_at"),
            sf.max_by("message", "failed_at").alias("last_error"),
        )
        .orderBy(sf.desc("jobs"), "type_name", "error_type")
    )


def finished_per_period(jobs: DataFrame, period: str) -> DataFrame:
    """Per job type and period: jobs that became ``failed`` and ``cancelled`` in it."""
    from pyspark.sql import functions as sf

    bucket = parse_period(period).start

    failed = (
        jobs.where((sf.col("status") == "failed") & sf.col("failed_at").isNotNull())
        .groupBy("type_name", bucket("failed_at").alias("period"))
        .agg(sf.count(sf.lit(1)).alias("failed"))
    )
    cancelled = (
        jobs.where((sf.col("status") == "cancelled") & sf.col("cancelled_at").isNotNull())
        .groupBy("type_name", bucket("cancelled_at").alias("period"))
        .agg(sf.count(sf.lit(1)).alias("cancelled"))
    )
    return failed.join(cancelled, ["type_name", "period"], "full_outer").fillna(0, ["failed", "cancelled"])


def cancellations(jobs: DataFrame, period: str) -> DataFrame:
    """Cancelled jobs per job type and period: ``cancelled``, ``claimed`` (a worker had taken
    the job at least once), ``with_reason`` (a reason was given to ``cancel_chain``)."""
    from pyspark.sql import functions as sf

    return (
        jobs.where((sf.col("status") == "cancelled") & sf.col("cancelled_at").isNotNull())
        .groupBy("type_name", parse_period(period).start("cancelled_at").alias("period"))
        .agg(
            sf.count(sf.lit(1)).alias("cancelled"),
            sf.count(sf.when(sf.col("attempt") > 0, 1)).alias("claimed"),
            sf.count(sf.when(sf.col("cancel_reason").isNotNull(), 1)).alias("with_reason"),
        )
        .orderBy("type_name", "period")
    )


def blocker_failures(jobs: DataFrame, chains: DataFrame) -> DataFrame:
    """Jobs failed by a blocker chain, per job type and the blocker chain's type and status."""
    from pyspark.sql import functions as sf

    caused = jobs.where((sf.col("status") == "failed") & sf.col("failed_by_chain_id").isNotNull())
    blockers = chains.select(
        sf.col("id").alias("failed_by_chain_id"),
        sf.col("type_name").alias("blocker_chain_type"),
        sf.col("status").alias("blocker_status"),
    )
    return (
        caused.join(blockers, "failed_by_chain_id", "left")
        .groupBy(
            "type_name",
            sf.coalesce(sf.col("blocker_chain_type"), sf.lit(DELETED)).alias("blocker_chain_type"),
            sf.coalesce(sf.col("blocker_status"), sf.lit(DELETED)).alias("blocker_status"),
        )
        .agg(
            sf.count(sf.lit(1)).alias("jobs"),
            sf.countDistinct("failed_by_chain_id").alias("blocker_chains"),
        )
        .orderBy(sf.desc("jobs"), "type_name", "blocker_chain_type", "blocker_status")
    )


__all__ = [
    "DELETED",
    "blocker_failures",
    "cancellations",
    "dead_letters",
    "finished_per_period",
    "history",
    "last_entry",
]
