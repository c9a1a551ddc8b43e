"""Chain-level report tables: chain duration per chain type, and each step's figures.

- ``chain_durations``: per chain type (``chain_type``), how many chains, how many completed,
  failed and cancelled (a chain's status is its last job's), and the chain duration
  p50/p95/p99 in seconds over completed chains. Chain duration is
  root job created → last job completed (the ``chains`` table's ``created_at`` and
  ``completed_at``), so it includes every wait, retry and blocker of the chain.
- ``chain_steps``: per chain type and step (``step`` 1 is the root job, 2 its first
  continuation, …) and the job type that ran it: jobs, completed jobs, and the median
  latency, wait and run time of that step (definitions as in :mod:`jobchain_spark.report`).
  A chain type whose chains take different paths has several job types at one step.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame


def _seconds(later: Column, earlier: Column) -> Column:
    return later.cast("double") - earlier.cast("double")


def chain_durations(chains: DataFrame, quantiles: tuple[float, ...], accuracy: int) -> DataFrame:
    """Chains, completed chains and duration percentiles per chain type."""
    from pyspark.sql import functions as sf

    counts = chains.groupBy(sf.col("type_name").alias("chain_type")).agg(
        sf.count(sf.lit(1)).alias("chains"),
        sf.count(sf.when(sf.col("status") == "completed", 1)).alias("completed"),
        sf.count(sf.when(sf.col("status") == "failed", 1)).alias("failed"),
        sf.count(sf.when(sf.col("status") == "cancelled", 1)).alias("cancelled"),
    )
    done = chains.where((sf.col("status") == "completed") & sf.col("completed_at").isNotNull())
    q = sf.percentile_approx(
        _seconds(sf.col("completed_at"), sf.col("created_at")), list(quantiles), accuracy
    )
    names = [f"duration_p{round(x * 100)}_s" for x in quantiles]
    durations = done.groupBy(sf.col("type_name").alias("chain_type")).agg(
        *[q[i].alias(name) for i, name in enumerate(names)]
    )
    return (
        counts.join(durations, "chain_type", "left")
        .select("chain_type", "chains", "completed", "failed", "cancelled", *names)
        .orderBy("chain_type")
    )


def chain_steps(jobs: DataFrame, accuracy: int) -> DataFrame:
    """Per chain type, step and job type: jobs, completed, median latency, wait and run."""
    from pyspark.sql import functions as sf

    completed = sf.col("status") == "completed"
    latency = sf.when(completed, _seconds(sf.col("completed_at"), sf.col("created_at")))
    wait = _seconds(sf.col("first_attempt_at"), sf.col("created_at"))
    run = sf.when(completed, _seconds(sf.col("completed_at"), sf.col("attempt_started_at")))
    return (
        jobs.groupBy(
            sf.col("chain_type_name").alias("chain_type"),
            (sf.col("chain_index") + 1).alias("step"),
            "type_name",
        )
        .agg(
            sf.count(sf.lit(1)).alias("jobs"),
            sf.count(sf.when(completed, 1)).alias("completed"),
            sf.percentile_approx(latency, 0.5, accuracy).alias("latency_p50_s"),
            sf.percentile_approx(wait, 0.5, accuracy).alias("wait_p50_s"),
            sf.percentile_approx(run, 0.5, accuracy).alias("run_p50_s"),
        )
        .orderBy("chain_type", "step", sf.desc("jobs"), "type_name")
    )


__all__ = ["chain_durations", "chain_steps"]
