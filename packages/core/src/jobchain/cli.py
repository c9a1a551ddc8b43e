"""The ``jobchain`` command line (click). Entry point: ``jobchain = "jobchain.cli:main"``.

Each command lives in a small function here or in its own module and is attached to ``main``
in the "Commands" section at the bottom, so adding one never touches the others.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

import click

from jobchain.cli_common import NOTIFY_URL_HELP, STATE_URL_HELP
from jobchain.errors import JobchainError
from jobchain.plugins.registry import RegisteredBackend, get_registry


def _version() -> str:
    try:
        return version("jobchain")
    except PackageNotFoundError:  # running from a source tree that is not installed
        return "unknown"


@click.group(name="jobchain", context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(_version(), "-V", "--version", prog_name="jobchain")
def main() -> None:
    """Durable, typed job chains that commit with your database transaction."""


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


@main.command("backends")
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


# ---------------------------------------------------------------- Commands
# Further commands live in their own modules and are attached here.

from jobchain.cli_migrate import migrate_command  # noqa: E402 -- attached after main is defined
from jobchain.cli_worker import worker_command  # noqa: E402

main.add_command(migrate_command)
main.add_command(worker_command)


__all__ = ["NOTIFY_URL_HELP", "STATE_URL_HELP", "main"]


if __name__ == "__main__":
    main()
