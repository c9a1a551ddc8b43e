"""``jobchain-spark``: archive and report from the command line.

::

    jobchain-spark archive --url postgresql://app@db/app --older-than 30d --to s3a://bucket/jobchain
    jobchain-spark report --url sqlite:///jobchain.db --archive ./archive --out ./report --period day

``--master`` picks the Spark master (default ``local[*]``); on a cluster run it through
``spark-submit`` and the session it provides is used.
"""

from __future__ import annotations

import sys
from typing import Any

import click

from jobchain.errors import JobchainError
from jobchain.url import mask_url


def _session(master: str | None) -> Any:
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName("jobchain-spark")
    if master:
        builder = builder.master(master)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session


@click.group()
def main() -> None:
    """Read, archive and report jobchain job history with Spark."""


@main.command("archive")
@click.option(
    "--url", required=True, envvar="JOBCHAIN_STATE_URL", help="State URL (sqlite:///…, postgresql://…)."
)
@click.option(
    "--older-than", "older_than", required=True, help="Archive chains completed longer ago, e.g. 30d."
)
@click.option("--to", "to", required=True, help="Archive root (a path or any Hadoop filesystem URI).")
@click.option("--batch-size", default=500, show_default=True, help="Chains per deletion transaction.")
@click.option("--master", default=None, help="Spark master, e.g. local[4] (default: the session's).")
def archive_command(url: str, older_than: str, to: str, batch_size: int, master: str | None) -> None:
    """Copy old completed chains to Parquet, verify the copy, then delete them from the hot tables."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from jobchain_spark.archive import archive
    from jobchain_spark.durations import parse_duration

    try:
        age = parse_duration("older-than", older_than)
        spark = _session(master)
        with Progress(
            TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn()
        ) as bar:
            task = bar.add_task("deleting archived chains", total=None)

            def progress(stage: str, done: int, total: int) -> None:
                bar.update(task, completed=done, total=total)

            click.echo(f"archiving chains completed more than {older_than} ago from {mask_url(url)} to {to}")
            result = archive(spark, url=url, to=to, older_than=age, batch_size=batch_size, progress=progress)
    except JobchainError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
    if result.resumed:
        click.echo(f"finished earlier run(s): {', '.join(result.resumed)}")
    click.echo(
        f"run {result.run_id or '(nothing new)'}: archived {result.chains} chains, {result.jobs} jobs, "
        f"{result.blockers} blocker rows; deleted {result.deleted}; kept {result.retained} still referenced"
    )


@main.command("report")
@click.option(
    "--url", required=True, envvar="JOBCHAIN_STATE_URL", help="State URL (sqlite:///…, postgresql://…)."
)
@click.option("--archive", "archive_root", default=None, help="Archive root to include.")
@click.option("--out", required=True, help="Output directory for report.html, charts/ and tables/.")
@click.option("--period", type=click.Choice(["hour", "day"]), default="hour", show_default=True)
@click.option("--master", default=None, help="Spark master, e.g. local[4] (default: the session's).")
def report_command(url: str, archive_root: str | None, out: str, period: str, master: str | None) -> None:
    """Compute throughput, latency, attempts, retries, errors and backlog; write HTML, PNG, Parquet, CSV."""
    from jobchain_spark.report import build_report
    from jobchain_spark.report_output import write_report

    try:
        spark = _session(master)
        path = write_report(build_report(spark, url=url, archive=archive_root, period=period), out)
    except JobchainError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
    click.echo(f"wrote {path}")


__all__ = ["main"]
