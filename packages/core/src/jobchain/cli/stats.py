"""``jobchain stats``: queue health per job type (``client.queue_stats()``)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import click
from rich.console import Group
from rich.table import Table

from jobchain.cli.common import json_option, open_client, run, short_duration, state_option
from jobchain.cli.listing import names
from jobchain.cli.render import console, emit_json, plain
from jobchain.stats import QueueStats, TypeStats


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
@state_option
@json_option
def stats_command(types: tuple[str, ...], state: str | None, as_json: bool) -> None:
    """Queue health per job type: counts by status, due and scheduled, oldest due, expired leases,
    recent completions and failures, attempt durations, failures by error type."""

    async def main() -> QueueStats:
        async with open_client(state) as client:
            return await client.queue_stats(type_names=names(types))

    stats = run(main(), state=state)
    if as_json:
        emit_json(stats_json(stats))
        return
    console().print(stats_view(stats))


def _age(stats: QueueStats, row: TypeStats) -> str:
    if row.oldest_due_at is None:
        return "-"
    return short_duration(max(stats.now - row.oldest_due_at, timedelta(0)))


def _recent(row: TypeStats) -> str:
    return "  ".join(f"{short_duration(w.window)} {w.completed}/{w.failed}" for w in row.recent) or "-"


def stats_view(stats: QueueStats) -> Group:
    """The per-type table, then failures by error type."""
    table = Table(title=f"queue at {stats.now.isoformat(sep=' ', timespec='seconds')}", show_edge=False)
    headers = (
        "TYPE", "BLOCKED", "DUE", "SCHEDULED", "RUNNING", "EXPIRED LEASES",
        "COMPLETED", "FAILED", "CANCELLED", "OLDEST DUE", "RECENT DONE/FAILED", "P50", "P95",
    )  # fmt: skip
    for header in headers:
        table.add_column(header, justify="left" if header in ("TYPE", "RECENT DONE/FAILED") else "right")
    for row in stats.types:
        durations = row.durations
        table.add_row(
            row.type_name,
            str(row.blocked),
            str(row.due),
            str(row.scheduled),
            str(row.running),
            str(row.expired_leases),
            str(row.completed),
            str(row.failed),
            str(row.cancelled),
            _age(stats, row),
            _recent(row),
            short_duration(durations.p50) if durations else "-",
            short_duration(durations.p95) if durations else "-",
        )
    if not stats.types:
        table.caption = "no jobs"
    parts: list[Any] = [table]
    errors = [(row.type_name, kind, n) for row in stats.types for kind, n in row.failed_by_error_type.items()]
    if errors:
        failed = Table(title="failed jobs by error type", show_edge=False)
        for header in ("TYPE", "ERROR TYPE", "FAILED"):
            failed.add_column(header, justify="right" if header == "FAILED" else "left")
        for type_name, kind, count in errors:
            failed.add_row(type_name, kind or "(none)", str(count))
        parts.append(failed)
    return Group(*parts)
