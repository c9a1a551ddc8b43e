"""``jobchain pause TYPE...`` and ``jobchain resume TYPE...``: stop and restart claiming job types.

The pause is kept by the state backend: no worker claims a paused type until it is resumed;
running jobs finish, and new jobs of the type are accepted and wait. Both ask first
(``--yes`` skips). Resuming publishes a wake-up per type (with ``--notify``) so idle
workers claim at once; without a notify backend they notice at their next poll.
"""

from __future__ import annotations

from typing import Any

import click

from jobchain.cli.bulk import confirm, plural
from jobchain.cli.common import json_option, notify_option, open_client, run, state_option, yes_option
from jobchain.cli.render import emit_json, when
from jobchain.client import Client
from jobchain.entities import PausedType
from jobchain.errors import InvalidArgumentError
from jobchain.job_types import validate_type_name


class TypeNameType(click.ParamType[str, Any]):
    """A job type name (letters, digits, ``_ . : -``); anything else is a usage error."""

    name = "type"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        try:
            return validate_type_name(value)
        except InvalidArgumentError as exc:
            self.fail(str(exc), param, ctx)


TYPE_NAME = TypeNameType()


def _listed(names: list[str]) -> str:
    return ", ".join(names)


async def unknown_types(client: Client, names: list[str]) -> list[str]:
    """The names among ``names`` with no job at all and no live worker serving them."""
    stats = await client.queue_stats(type_names=names, windows=())
    served = {
        name
        for worker in await client.list_workers(states=["running", "draining"])
        for name in worker.type_names
    }
    return [row.type_name for row in stats.types if row.type_name not in served and row.total == 0]


@click.command("pause")
@click.argument("type_names", nargs=-1, required=True, type=TYPE_NAME, metavar="TYPE...")
@yes_option
@state_option
@notify_option
@json_option
def pause_command(
    type_names: tuple[str, ...], yes: bool, state: str | None, notify: str | None, as_json: bool
) -> None:
    """Pause job types: no worker claims them until `jobchain resume`. Running jobs finish;
    new jobs are accepted and wait. Asks first (--yes skips)."""
    names = list(dict.fromkeys(type_names))

    async def main() -> list[PausedType]:
        async with open_client(state, notify) as client:
            unknown = await unknown_types(client, names)
            if unknown:
                # Any name can be paused; a typo would otherwise pause nothing that exists.
                click.echo(
                    f"note: no job of type {_listed(unknown)} exists and no live worker serves it "
                    "(check the name)",
                    err=True,
                )
            confirm(
                f"Pause {plural(len(names), 'job type')} ({_listed(names)})? "
                "No worker claims them until resumed.",
                yes,
            )
            return await client.pause(*names)

    paused = run(main(), state=state)
    if as_json:
        emit_json(
            {"paused": [{"type_name": p.type_name, "paused_at": p.paused_at.isoformat()} for p in paused]}
        )
        return
    for item in paused:
        click.echo(f"paused {item.type_name} (since {when(item.paused_at)})")


@click.command("resume")
@click.argument("type_names", nargs=-1, required=True, type=TYPE_NAME, metavar="TYPE...")
@yes_option
@state_option
@notify_option
@json_option
def resume_command(
    type_names: tuple[str, ...], yes: bool, state: str | None, notify: str | None, as_json: bool
) -> None:
    """Resume paused job types: workers claim their waiting jobs again (at once with --notify,
    else at their next poll). Asks first (--yes skips)."""
    names = list(dict.fromkeys(type_names))
    confirm(f"Resume {plural(len(names), 'job type')} ({_listed(names)})?", yes)

    async def main() -> list[str]:
        async with open_client(state, notify) as client:
            return await client.resume(*names)

    resumed = run(main(), state=state)
    not_paused = [name for name in names if name not in resumed]
    if as_json:
        emit_json({"resumed": resumed, "not_paused": not_paused})
        return
    for name in resumed:
        click.echo(f"resumed {name}")
    for name in not_paused:
        click.echo(f"{name} was not paused")
