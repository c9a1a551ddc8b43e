"""``jobchain backends``: the installed backends, one per scheme and role."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

import click

from jobchain.errors import JobchainError
from jobchain.plugins.manager import get_loaded_plugins
from jobchain.plugins.registry import RegisteredBackend, get_registry


def _installed_version(distribution: str) -> str:
    try:
        return version(distribution)
    except PackageNotFoundError:
        return "-"  # registered in-process with register(), not installed


def _table(rows: list[tuple[str, ...]]) -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in rows
    )


def _row(entry: RegisteredBackend) -> tuple[str, ...]:
    spec = entry.spec
    return (
        f"{spec.scheme}://",
        spec.role,
        spec.distribution,
        _installed_version(spec.distribution),
        spec.factory,
    )


@click.command("backends")
def backends_command() -> None:
    """List the installed backends: scheme, role, distribution, version and factory."""
    try:
        entries = get_registry().entries()
    except JobchainError as exc:  # e.g. BackendConflictError: the message names both distributions
        raise click.ClickException(str(exc)) from exc
    header = ("SCHEME", "ROLE", "DISTRIBUTION", "VERSION", "FACTORY")
    click.echo(_table([header, *(_row(entry) for entry in entries)]))
    for failure in get_registry().failures:
        click.echo(
            f"broken plugin {failure.name!r} ({failure.module}) from {failure.distribution or 'unknown'}: "
            f"{failure.error}",
            err=True,
        )
    for hook in get_loaded_plugins().unmarked_hooks:
        click.echo(
            f"plugin {hook.plugin!r} ({hook.module}) from {hook.distribution or 'unknown'}: "
            f"{hook.function} has no @jobchain.plugins.hookimpl, so it never runs",
            err=True,
        )
