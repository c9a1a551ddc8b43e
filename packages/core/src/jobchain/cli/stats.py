"""``jobchain stats``: queue health per job type (``client.queue_stats()``)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import click
from rich.console import Group
from rich.table import Table
from rich.text import Text

from jobchain.cli.common import DURATION, json_option, open_client, run, short_duration, state_option
from jobchain.cli.listing import names
from jobchain.cli.render import console, emit_json, plain, table
from jobchain.stats import ERROR_SAMPLE_MAX, QueueStats, TypeStats

THROUGHPUT_ROWS = 12
"""The table view lists at most this many periods, the latest that had finished jobs."""


def stats_json(stats: QueueStats) -> dict[str, Any]:
    """Every field of :class:`~jobchain.stats.QueueStats` (durations in seconds)."""
    data: dict[str, Any] = plain(stats)
    return data


@click.command("stats")
@click.option(
    "--type",
    "types",
    multiple=True,
    metavar="NAME",
    help="Only these job types (repeatable; shown even with no jobs).",
)
@click.option(
    "--throughput-window",
    type=DURATION,
    default="1h",
    show_default=True,
    help="Count completions and failures over this much history (throughput), ...",
)
@click.option(
    "--throughput-step",
    type=DURATION,
    default="1m",
    show_default=True,
    help="... per period of this length (at most 1,440 periods).",
)
@click.option(
    "--error-sample",
    type=click.IntRange(0, ERROR_SAMPLE_MAX),
    default=1_000,
    show_default=True,
    help="Group the errors of this many of the newest failed jobs by fingerprint (0: none).",
)
@state_option
@json_option
def stats_command(
    types: tuple[str, ...],
    throughput_window: timedelta,
    throughput_step: timedelta,
    error_sample: int,
    state: str | None,
    as_json: bool,
) -> None:
    """Queue health per job type: counts by status, due and scheduled, oldest due, expired leases,
    recent completions and failures, attempt durations, failures by error type and errors
    grouped by fingerprint, throughput; paused types are marked (and listed even with no
    jobs); a degraded notify delivery is said."""

    async def main() -> QueueStats:
        async with open_client(state) as client:
            return await client.queue_stats(
                type_names=names(types),
                throughput_window=throughput_window,
                throughput_step=throughput_step,
                error_sample=error_sample,
            )

    stats = run(main(), state=state)
    if as_json:
        emit_json(stats_json(stats))
        return
    console().print(stats_view(stats))


def type_cell(row: TypeStats) -> Text:
    """The type's name, with a ``paused`` marker when no worker claims it."""
    cell = Text(row.type_name)
    if row.paused:
        cell.append(" paused", style="bold yellow")
    return cell


def _age(stats: QueueStats, row: TypeStats) -> str:
    if row.oldest_due_at is None:
        return "-"
    return short_duration(max(stats.now - row.oldest_due_at, timedelta(0)))


def stats_view(stats: QueueStats) -> Group:
    """Counts per type, then recent activity and durations, then failures by error type and by
    fingerprint, then throughput; a degraded notify delivery first."""
    title = f"queue at {stats.now.isoformat(sep=' ', timespec='seconds')}"
    counts = table(
        "TYPE", "BLOCKED", "DUE", "SCHEDULED", "RUNNING", "EXPIRED", "COMPLETED", "FAILED", "CANCELLED",
        "OLDEST DUE", title=title,
    )  # fmt: skip
    for row in stats.types:
        counts.add_row(
            type_cell(row),
            *(str(n) for n in (row.blocked, row.due, row.scheduled, row.running, row.expired_leases)),
            *(str(n) for n in (row.completed, row.failed, row.cancelled)),
            _age(stats, row),
        )
    if not stats.types:
        counts.caption = "no jobs"
    elif any(row.paused for row in stats.types):
        counts.caption = "paused: no worker claims the type until `jobchain resume TYPE`"
    parts: list[Any] = []
    if stats.notify_degraded:
        parts.append(
            Text(
                f"notify delivery degraded: {stats.notify_reason}; workers and await_chain poll",
                style="bold yellow",
            )
        )
    parts.append(counts)
    windows = [w.window for w in stats.types[0].recent] if stats.types else []
    if windows:
        recent = table(
            "TYPE",
            *(f"DONE/FAILED {short_duration(w)}" for w in windows),
            "P50", "P95", "P99", "SAMPLE",
            title="finished recently; attempt durations",
        )  # fmt: skip
        for row in stats.types:
            durations = row.durations
            figures = (
                [short_duration(d) for d in (durations.p50, durations.p95, durations.p99)]
                + [str(durations.count)]
                if durations
                else ["-", "-", "-", "0"]
            )
            recent.add_row(row.type_name, *(f"{w.completed}/{w.failed}" for w in row.recent), *figures)
        parts.append(recent)
    errors = [(row.type_name, kind, n) for row in stats.types for kind, n in row.failed_by_error_type.items()]
    if errors:
        failed = table("TYPE", "ERROR TYPE", "FAILED", title="failed jobs by error type")
        for type_name, kind, count in errors:
            failed.add_row(type_name, kind or "(none)", str(count))
        parts.append(failed)
    if stats.error_groups:
        parts.append(error_groups_table(stats))
    busy = [bucket for bucket in stats.throughput if bucket.completed or bucket.failed][-THROUGHPUT_ROWS:]
    if busy:
        step = stats.throughput[1].start - stats.throughput[0].start if len(stats.throughput) > 1 else None
        every = f" per {short_duration(step)}" if step else ""
        finished = table("FROM", "COMPLETED", "FAILED", title=f"finished{every}, latest periods with any")
        for bucket in busy:
            finished.add_row(
                bucket.start.isoformat(sep=" ", timespec="seconds"), str(bucket.completed), str(bucket.failed)
            )
        parts.append(finished)
    return Group(*parts)


def error_groups_table(stats: QueueStats) -> Table:
    """Failed jobs by the fingerprint of their last error: an example, jobs, distinct messages."""
    groups = table(
        "ERROR", "JOBS", "MESSAGES", "TYPES",
        title=f"failed jobs by error, grouped ({stats.errors_read:,} newest read)",
    )  # fmt: skip
    for group in stats.error_groups:
        groups.add_row(group.example, str(group.jobs), str(group.messages), ", ".join(group.type_names))
    return groups
