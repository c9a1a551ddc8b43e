"""What the bulk actions share: picking ids or a filter, confirming, and progress by batch.

A bulk action reads its selection through the listing API a page at a time, asks before
it changes anything (``--yes`` skips the question), then writes in batches, one
transaction per batch, with a progress bar on stderr (stdout stays for the result).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING

import click
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from jobchain.cli.common import F
from jobchain.cli.listing import iterate
from jobchain.cli.render import console
from jobchain.entities import Chain, Page

if TYPE_CHECKING:
    from jobchain.client import Client

DEFAULT_BATCH = 100


def batch_option(f: F) -> F:
    """``--batch-size``: items written per transaction by a bulk action."""
    return click.option(
        "--batch-size",
        type=click.IntRange(1, 500),
        default=DEFAULT_BATCH,
        show_default=True,
        help="Items changed per transaction.",
    )(f)


def require_one_selection(has_ids: bool, has_filter: bool, filters: str) -> None:
    """Ids or a filter, exactly one of them; otherwise a usage error saying what to give."""
    if has_ids and has_filter:
        raise click.UsageError(f"give ids or a filter ({filters}), not both")
    if not has_ids and not has_filter:
        raise click.UsageError(f"give ids, or a filter ({filters}) to select many")


def confirm(question: str, yes: bool) -> None:
    """Ask ``question`` on stderr unless ``--yes``; a "no" (or no terminal answer) aborts (exit 1)."""
    if not yes:
        click.confirm(question, abort=True, err=True)


def progress_bar() -> Progress:
    """A progress bar on stderr: description, bar, done/total, elapsed time."""
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console(stderr=True),
        transient=False,
    )


async def in_batches(
    ids: Sequence[str],
    size: int,
    description: str,
    apply: Callable[[list[str]], Awaitable[int]],
) -> int:
    """Apply ``apply`` to ``ids`` ``size`` at a time under a progress bar; the sum of its results."""
    done = 0
    with progress_bar() as progress:
        task = progress.add_task(description, total=len(ids))
        for start in range(0, len(ids), size):
            batch = list(ids[start : start + size])
            done += await apply(batch)
            progress.advance(task, len(batch))
    return done


async def matching_chain_ids(
    client: Client,
    *,
    type_names: list[str],
    statuses: list[str],
    created_from: datetime | None,
    created_to: datetime | None,
) -> list[str]:
    """Every chain a bulk filter selects, oldest first, read a page at a time."""

    async def fetch(at: str | None, size: int) -> Page[Chain]:
        return await client.list_chains(
            type_names=type_names,
            statuses=statuses,
            created_from=created_from,
            created_to=created_to,
            order="asc",
            cursor=at,
            limit=size,
        )

    return [chain.id async for chain in iterate(fetch)]


def plural(count: int, word: str) -> str:
    """``1 chain``, ``3 chains``."""
    return f"{count} {word}{'' if count == 1 else 's'}"
