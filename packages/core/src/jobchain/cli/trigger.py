"""``jobchain trigger JOB_ID...``: make scheduled (pending) jobs eligible now."""

from __future__ import annotations

import click

from jobchain.cli.common import JOB_ID, json_option, notify_option, open_client, run, state_option
from jobchain.cli.render import emit_json
from jobchain.entities import Job


@click.command("trigger")
@click.argument("job_ids", nargs=-1, required=True, type=JOB_ID, metavar="JOB_ID...")
@state_option
@notify_option
@json_option
def trigger_command(job_ids: tuple[str, ...], state: str | None, notify: str | None, as_json: bool) -> None:
    """Run pending jobs now instead of at their scheduled time (all or nothing)."""

    async def main() -> list[Job]:
        async with open_client(state, notify) as client, client.transaction() as tx:
            return await client.trigger_jobs(tx, list(dict.fromkeys(job_ids)))

    triggered = run(main(), state=state)
    if as_json:
        emit_json({"triggered": [job.id for job in triggered]})
        return
    for job in triggered:
        click.echo(f"triggered {job.id} ({job.type_name})")
