"""``jobchain migrate``: apply the state backend's schema migrations (idempotent)."""

from __future__ import annotations

import asyncio

import click

from jobchain.cli.common import STATE_URL_HELP
from jobchain.errors import JobchainError


async def _migrate(state: str | None) -> str:
    from jobchain.connect_backends import open_state

    adapter = await open_state(state)
    try:
        await adapter.migrate()
    finally:
        await adapter.close()
    return type(adapter).__name__


@click.command("migrate")
@click.option("--state", default=None, help=STATE_URL_HELP)
def migrate_command(state: str | None) -> None:
    """Create or upgrade the job tables of the state backend."""
    try:
        name = asyncio.run(_migrate(state))
    except JobchainError as exc:
        # One line: driver messages (libpq's "Is the server running…") span several.
        raise click.ClickException(" ".join(str(exc).split())) from exc
    click.echo(f"migrated ({name})")
