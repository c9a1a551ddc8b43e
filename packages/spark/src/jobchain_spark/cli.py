"""``jobchain-spark``: archive and report from the command line.

::

    jobchain-spark archive --url postgresql://app@db/app --older-than 30d --to s3a://bucket/jobchain
    jobchain-spark archive --url … --older-than 30d --to … --statuses completed,cancelled,failed --dry-run
    jobchain-spark report --url sqlite:///jobchain.db --archive ./archive --out ./report --period day
    jobchain-spark report --url sqlite:///jobchain.db --out ./report --period 5m

``--master`` picks the Spark master (default ``local[*]``); on a cluster run it through
``spark-submit`` and the session it provides is used. A local session runs its Python
workers with this interpreter unless ``PYSPARK_PYTHON`` is set.

An error prints one line (``error: ...``) and exits non-zero; ``jobchain-spark --debug ...``
prints the full Python and Java trace instead.
"""

from __future__ import annotations

import sys
from datetime import datetime
from typing import Any

import click

from jobchain.url import mask_url
from jobchain_spark.archive import DEFAULT_STATUSES, ArchiveResult, archive, resolve_statuses
from jobchain_spark.cli_errors import exit_code, one_line


def _session(master: str | None) -> Any:
    from jobchain_spark.session import local_session

    debug = bool(click.get_current_context().find_root().params.get("debug"))
    # Without --debug Spark's own log stays silent: its stack traces would bury our one line.
    return local_session(master, quiet=not debug)


def _check_url(url: str) -> None:
    """Reject a bad state URL before a JVM is started for it."""
    from jobchain_spark.dialects import dialect_for

    dialect_for(url)


class _OneLineErrors(click.Group):
    """Turns any error of a command into one line on stderr (the full trace with --debug)."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (click.exceptions.Exit, click.ClickException, click.Abort):
            raise
        except Exception as exc:
            if ctx.params.get("debug"):
                raise
            click.echo(f"error: {one_line(exc)} (run with --debug for the full trace)", err=True)
            sys.exit(exit_code(exc))


@click.group(cls=_OneLineErrors)
@click.option("--debug", is_flag=True, help="On error, print the full Python and Java trace.")
def main(debug: bool) -> None:
    """Read, archive and report jobchain job history with Spark."""


@main.command("archive")
@click.option(
    "--url", required=True, envvar="JOBCHAIN_STATE_URL", help="State URL (sqlite:///…, postgresql://…)."
)
@click.option(
    "--older-than",
    "older_than",
    required=True,
    help="Archive chains that finished longer ago, e.g. 30d.",
)
@click.option("--to", "to", required=True, help="Archive root (a path or any Hadoop filesystem URI).")
@click.option(
    "--statuses",
    default=",".join(DEFAULT_STATUSES),
    show_default=True,
    help="Chain statuses to archive, comma-separated: completed, cancelled, failed. Failed chains "
    "(dead letters) stay in the queue unless named.",
)
@click.option(
    "--dry-run",
    "dry_run",
    is_flag=True,
    help="Say what would be archived (chains per status, time range) and deleted; change nothing.",
)
@click.option("--batch-size", default=500, show_default=True, help="Chains per deletion transaction.")
@click.option("--master", default=None, help="Spark master, e.g. local[4] (default: the session's).")
def archive_command(
    url: str, older_than: str, to: str, statuses: str, dry_run: bool, batch_size: int, master: str | None
) -> None:
    """Copy old finished chains to Parquet, verify the copy, then delete them from the hot tables.

    Completed and cancelled chains by default; failed chains (dead letters) only with
    --statuses completed,cancelled,failed. --dry-run writes and deletes nothing.
    """
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from jobchain_spark.durations import parse_duration

    age = parse_duration("older-than", older_than)
    chosen = resolve_statuses(statuses)
    _check_url(url)
    spark = _session(master)
    what = f"{', '.join(chosen)} chains finished more than {older_than} ago"
    kept = "" if "failed" in chosen else " (failed chains stay: add failed to --statuses to archive them)"
    if dry_run:
        click.echo(f"dry run (nothing is written or deleted): {what}, from {mask_url(url)} to {to}{kept}")
        plan = archive(
            spark, url=url, to=to, older_than=age, statuses=chosen, batch_size=batch_size, dry_run=True
        )
        if plan.resumed:
            click.echo(
                f"would first finish earlier run(s) {', '.join(plan.resumed)}: "
                f"delete {plan.pending_deletions} chains already archived"
            )
        click.echo(f"would archive {_archived(plan)}")
        click.echo("nothing was written or deleted")
        return

    with Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn()
    ) as bar:
        task = bar.add_task("deleting archived chains", total=None)

        def progress(stage: str, done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        click.echo(f"archiving {what} from {mask_url(url)} to {to}{kept}")
        result = archive(
            spark, url=url, to=to, older_than=age, statuses=chosen, batch_size=batch_size, progress=progress
        )
    if result.resumed:
        click.echo(f"finished earlier run(s): {', '.join(result.resumed)}")
    click.echo(
        f"run {result.run_id or '(nothing new)'}: archived {_archived(result)}; "
        f"deleted {result.deleted}; kept {result.retained} still referenced"
    )


def _archived(result: ArchiveResult) -> str:
    """``N chains (completed 1, …) finished FROM to TO, N jobs, N blocker rows``."""
    if not result.chains:
        return "0 chains"
    per_status = ", ".join(f"{status} {count}" for status, count in result.by_status.items())
    return (
        f"{result.chains} chains ({per_status}) finished {_utc(result.finished_from)} to "
        f"{_utc(result.finished_to)}, {result.jobs} jobs, {result.blockers} blocker rows"
    )


def _utc(moment: datetime | None) -> str:
    return "?" if moment is None else f"{moment:%Y-%m-%d %H:%M:%S} UTC"


@main.command("report")
@click.option(
    "--url", required=True, envvar="JOBCHAIN_STATE_URL", help="State URL (sqlite:///…, postgresql://…)."
)
@click.option("--archive", "archive_root", default=None, help="Archive root to include.")
@click.option("--out", required=True, help="Output directory for report.html, charts/ and tables/.")
@click.option(
    "--period",
    default="hour",
    show_default=True,
    help="Time buckets: minute, hour, day, or whole minutes that divide a day (5m, 15m, 2h).",
)
@click.option("--master", default=None, help="Spark master, e.g. local[4] (default: the session's).")
def report_command(url: str, archive_root: str | None, out: str, period: str, master: str | None) -> None:
    """Compute throughput, latency, attempts, retries, errors and backlog; write HTML, PNG, Parquet, CSV."""
    from jobchain_spark.report import build_report
    from jobchain_spark.report_output import write_report
    from jobchain_spark.report_periods import parse_period

    _check_url(url)
    parse_period(period)  # a bad period is refused before a JVM is started for it
    spark = _session(master)
    path = write_report(build_report(spark, url=url, archive=archive_root, period=period), out)
    click.echo(f"wrote {path}")


__all__ = ["main"]
