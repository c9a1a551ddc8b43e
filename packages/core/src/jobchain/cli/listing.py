"""Filters and paging shared by ``jobs list``, ``chains list`` and the bulk actions."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal, TypeVar, cast

import click

from jobchain.cli.common import DURATION, F
from jobchain.contracts.state import DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE
from jobchain.entities import Page

T = TypeVar("T")
Order = Literal["asc", "desc"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Window:
    """Creation-time bounds from ``--newer-than`` / ``--older-than`` (durations before now)."""

    newer_than: timedelta | None = None
    older_than: timedelta | None = None

    def bounds(self, now: datetime | None = None) -> tuple[datetime | None, datetime | None]:
        """``(created_from, created_to)`` for the listing APIs."""
        now = now or datetime.now(UTC)
        start = now - self.newer_than if self.newer_than is not None else None
        end = now - self.older_than if self.older_than is not None else None
        return start, end

    @property
    def given(self) -> bool:
        return self.newer_than is not None or self.older_than is not None


def window_options(f: F) -> F:
    """``--newer-than`` and ``--older-than``: creation time relative to now."""
    f = click.option(
        "--older-than", type=DURATION, default=None, help="Created at least this long ago (e.g. 7d)."
    )(f)
    return click.option(
        "--newer-than", type=DURATION, default=None, help="Created at most this long ago (e.g. 1h)."
    )(f)


def paging_options(f: F) -> F:
    """``--limit``, ``--cursor``, ``--order`` and ``--all``."""
    f = click.option("--all", "all_pages", is_flag=True, help="Follow the cursors and print every match.")(f)
    f = click.option(
        "--order",
        type=click.Choice(["desc", "asc"]),
        default="desc",
        show_default=True,
        help="Newest first (desc) or oldest first (asc), by creation time.",
    )(f)
    f = click.option("--cursor", default=None, help="The next_cursor of the previous page.")(f)
    return click.option(
        "--limit",
        type=click.IntRange(1, MAX_PAGE_SIZE),
        default=DEFAULT_PAGE_SIZE,
        show_default=True,
        help="Items per page.",
    )(f)


@dataclass(frozen=True, slots=True, kw_only=True)
class Paging:
    """What ``paging_options`` parsed."""

    limit: int = DEFAULT_PAGE_SIZE
    cursor: str | None = None
    order: str = "desc"
    all_pages: bool = False

    @property
    def direction(self) -> Order:
        return cast(Order, self.order)


async def read_pages(fetch: Callable[[str | None, int], Awaitable[Page[T]]], paging: Paging) -> Page[T]:
    """One page, or with ``--all`` every page concatenated (``next_cursor`` None)."""
    page = await fetch(paging.cursor, paging.limit)
    if not paging.all_pages:
        return page
    items = list(page.items)
    cursor = page.next_cursor
    while cursor is not None:
        page = await fetch(cursor, MAX_PAGE_SIZE)
        items += page.items
        cursor = page.next_cursor
    return Page(items=items, next_cursor=None)


async def iterate(fetch: Callable[[str | None, int], Awaitable[Page[T]]]) -> AsyncIterator[T]:
    """Every item of a listing, a full page at a time."""
    cursor: str | None = None
    while True:
        page = await fetch(cursor, MAX_PAGE_SIZE)
        for item in page.items:
            yield item
        cursor = page.next_cursor
        if cursor is None:
            return


def names(values: Sequence[str]) -> list[str]:
    """Repeated ``--type``-like options as a list with duplicates dropped."""
    return list(dict.fromkeys(values))


def page_hint(page: Page[Any], command: str) -> None:
    """Tell a person how to read the next page (stderr, so stdout stays the table)."""
    if page.next_cursor is not None:
        click.echo(f"more: repeat `{command}` with --cursor {page.next_cursor} (or use --all)", err=True)
