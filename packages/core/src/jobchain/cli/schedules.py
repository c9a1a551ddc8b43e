"""``jobchain schedules``: the periodic schedules workers registered (``client.list_schedules()``).

The state backend keeps them, so this needs none of the code that declares them. A schedule
no worker has registered for a day is marked stale: it was removed from the code, or no
worker running it is up.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any, Final

import click
from rich.table import Table
from rich.text import Text

from jobchain.cli.common import ago, json_option, open_client, run, state_option
from jobchain.cli.render import console, emit_json, plain, short, table
from jobchain.entities import ScheduleRecord

STALE_AFTER: Final = timedelta(days=1)
"""A schedule not registered by any worker for this long is shown as stale."""


def is_stale(record: ScheduleRecord, now: datetime) -> bool:
    """No worker has registered ``record`` for :data:`STALE_AFTER`."""
    return now - record.last_seen_at > STALE_AFTER


def schedule_json(record: ScheduleRecord, now: datetime) -> dict[str, Any]:
    """Every field of :class:`~jobchain.entities.ScheduleRecord`, plus ``stale``."""
    data: dict[str, Any] = plain(record)
    data["stale"] = is_stale(record, now)
    return data


@click.command("schedules")
@state_option
@json_option
def schedules_command(state: str | None, as_json: bool) -> None:
    """List the periodic schedules workers run: cron, timezone, job type, next run, last tick
    and its chain, when a worker last registered it (stale after a day)."""

    async def main() -> list[ScheduleRecord]:
        async with open_client(state) as client:
            return await client.list_schedules()

    records = run(main(), state=state)
    now = datetime.now(UTC)
    if as_json:
        emit_json({"items": [schedule_json(record, now) for record in records]})
        return
    console().print(schedules_table(records, now))


def schedules_table(records: list[ScheduleRecord], now: datetime) -> Table:
    """One row per schedule, in name order; stale ones flagged in the last column."""
    out = table(
        "NAME", "CRON", "TIMEZONE", "TYPE", "NEXT RUN", "LAST TICK", "LAST CHAIN", "LAST SEEN", "WORKER", "",
    )  # fmt: skip
    for record in records:
        out.add_row(
            record.name,
            record.cron,
            record.timezone,
            record.type_name,
            short(record.next_tick_at),
            short(record.last_tick_at),
            record.last_chain_id or "-",
            ago(record.last_seen_at, now),
            record.worker_name,
            Text("stale", style="bold yellow") if is_stale(record, now) else "",
        )
    if not records:
        out.caption = "no schedules registered (workers register theirs when they start)"
    return out
