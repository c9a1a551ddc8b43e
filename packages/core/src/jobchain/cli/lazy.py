"""A click group whose commands are imported on first use, from a ``name → "module:attr"`` table.

``jobchain --help`` lists every command from the table's own help text, so it imports no
command module: the dashboard's web stack, a backend's driver or the worker's machinery load
only when their command runs. A command whose module needs an optional extra that is not
installed is still listed; running it prints the ``pip install`` line and exits 1.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import click


@dataclass(frozen=True, kw_only=True, slots=True)
class LazyCommand:
    """One entry of the command table: where the command lives and its one-line help."""

    target: str
    """``"module:attribute"`` of the click command or group."""
    help: str
    """The line ``jobchain --help`` shows, read without importing ``target``."""
    extra: str | None = None
    """The optional extra the module needs (``pip install 'jobchain[extra]'``), if any."""


class LazyGroup(click.Group):
    """A group that resolves its commands from a table of :class:`LazyCommand` entries."""

    def __init__(self, *args: object, table: Mapping[str, LazyCommand], **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]  # click's own untyped **attrs
        self.table = dict(table)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*self.table, *super().list_commands(ctx)})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        entry = self.table.get(cmd_name)
        if entry is None:
            return super().get_command(ctx, cmd_name)
        return load_command(cmd_name, entry)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows: list[tuple[str, str]] = []
        for name in self.list_commands(ctx):
            entry = self.table.get(name)
            if entry is not None:
                rows.append((name, entry.help))
                continue
            command = super().get_command(ctx, name)
            if command is not None and not command.hidden:
                rows.append((name, command.get_short_help_str()))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


def load_command(name: str, entry: LazyCommand) -> click.Command:
    """Import the entry's command; a missing optional extra gives a stand-in that says what to install."""
    module_name, _, attribute = entry.target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        if entry.extra is None:
            raise
        return missing_extra_command(name, entry, exc)
    command = getattr(module, attribute)
    if not isinstance(command, click.Command):
        raise TypeError(f"{entry.target} is not a click command")
    return command


def missing_extra_command(name: str, entry: LazyCommand, error: ImportError) -> click.Command:
    """A command that accepts anything and fails with one line naming the extra to install."""
    missing = f" ({error})" if str(error) else ""

    def fail(args: Sequence[str]) -> None:
        raise click.ClickException(
            f"jobchain {name} needs the optional dependencies of the '{entry.extra}' extra{missing}: "
            f"pip install 'jobchain[{entry.extra}]'"
        )

    return click.Command(
        name,
        callback=fail,
        params=[click.Argument(["args"], nargs=-1, type=click.UNPROCESSED)],
        help=f"{entry.help} (not available: pip install 'jobchain[{entry.extra}]')",
        context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
        add_help_option=False,
    )
