"""Cursor pagination shared by every listing: opaque keyset cursors bound to their query,
page-size limits, and stability while rows are inserted or deleted between pages."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from datetime import datetime
from typing import Any

import pytest

from jobchain.contracts import (
    DEFAULT_PAGE_SIZE,
    MAX_PAGE_SIZE,
    BlockedJobsList,
    ChainJobsList,
    ChainsDelete,
    ChainsList,
    JobsList,
    StateAdapter,
)
from jobchain.errors import InvalidCursorError, InvalidPageSizeError
from jobchain.pagination import query_fingerprint
from jobchain_conformance.helpers import create, ids, new_job, start
from jobchain_conformance.suites.state_listing import at, chain_ids, chains, five_chains, jobs, walk

LISTINGS: list[tuple[str, Callable[..., Any]]] = [
    ("chains_list", lambda **kw: ChainsList(**kw)),
    ("jobs_list", lambda **kw: JobsList(**kw)),
    ("chain_jobs_list", lambda **kw: ChainJobsList(chain_id="c", **kw)),
    ("blocked_jobs_list", lambda **kw: BlockedJobsList(blocker_chain_id="c", **kw)),
]


def _foreign_cursor(payload: object) -> str:
    return base64.urlsafe_b64encode(json.dumps(payload).encode()).decode().rstrip("=")


class PageSizeTests:
    """Page limits are checked when the params are built, before any adapter call."""

    @pytest.mark.parametrize("limit", [0, -1, MAX_PAGE_SIZE + 1])
    @pytest.mark.parametrize(("listing", "build"), LISTINGS, ids=[name for name, _ in LISTINGS])
    def test_out_of_range_page_limit_is_rejected(
        self, listing: str, build: Callable[..., Any], limit: int
    ) -> None:
        with pytest.raises(InvalidPageSizeError, match=str(MAX_PAGE_SIZE)):
            build(limit=limit)

    @pytest.mark.parametrize(("listing", "build"), LISTINGS, ids=[name for name, _ in LISTINGS])
    def test_page_limit_bounds_are_accepted(self, listing: str, build: Callable[..., Any]) -> None:
        assert build(limit=1).limit == 1
        assert build(limit=MAX_PAGE_SIZE).limit == MAX_PAGE_SIZE
        assert build().limit == DEFAULT_PAGE_SIZE

    async def test_default_page_holds_the_default_page_size(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        await create(state_adapter, [new_job() for _ in range(DEFAULT_PAGE_SIZE + 1)], now=now)
        first = await jobs(state_adapter, JobsList())
        assert len(first.items) == DEFAULT_PAGE_SIZE
        assert first.next_cursor is not None
        rest = await jobs(state_adapter, JobsList(cursor=first.next_cursor))
        assert len(rest.items) == 1
        assert rest.next_cursor is None


class CursorTests:
    """Cursors are opaque, bound to the query that produced them, and keyset-stable."""

    async def test_cursor_from_another_listing_is_rejected(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        await five_chains(state_adapter, now)
        cursor = (await chains(state_adapter, ChainsList(limit=2))).next_cursor
        assert cursor is not None
        with pytest.raises(InvalidCursorError):
            await jobs(state_adapter, JobsList(limit=2, cursor=cursor))

    async def test_cursor_from_other_filters_is_rejected(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        await five_chains(state_adapter, now)
        cursor = (await chains(state_adapter, ChainsList(limit=2))).next_cursor
        assert cursor is not None
        with pytest.raises(InvalidCursorError):
            await chains(state_adapter, ChainsList(limit=2, cursor=cursor, statuses=["pending"]))

    async def test_cursor_from_the_other_order_is_rejected(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        await five_chains(state_adapter, now)
        cursor = (await chains(state_adapter, ChainsList(limit=2))).next_cursor
        assert cursor is not None
        with pytest.raises(InvalidCursorError):
            await chains(state_adapter, ChainsList(limit=2, cursor=cursor, order="asc"))

    async def test_cursor_keeps_working_with_another_page_size(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        created = await five_chains(state_adapter, now)
        cursor = (await chains(state_adapter, ChainsList(limit=2, order="asc"))).next_cursor
        page = await chains(state_adapter, ChainsList(limit=3, cursor=cursor, order="asc"))
        assert chain_ids(page) == ids(created[2:])

    @pytest.mark.parametrize(
        "cursor",
        ["not a cursor", "", "eyJ", _foreign_cursor({"page": 2}), _foreign_cursor([1, 2, 3])],
        ids=["text", "empty", "truncated", "foreign-json-object", "foreign-json-list"],
    )
    async def test_garbage_cursor_is_rejected(
        self, state_adapter: StateAdapter, now: datetime, cursor: str
    ) -> None:
        await five_chains(state_adapter, now)
        with pytest.raises(InvalidCursorError):
            await chains(state_adapter, ChainsList(cursor=cursor))

    @pytest.mark.parametrize(
        ("listing", "key", "item"),
        [
            ("chain_jobs_list", 2**70, "id"),
            ("chain_jobs_list", -(2**64), "id"),
            ("chains_list", "2026-01-01T00:00:00+00:00", "id\x00"),
            ("jobs_list", "2026-01-01T00:00:00+00:00\ud800", "id"),
            ("jobs_list", "not a time", "id"),
            ("blocked_jobs_list", "x" * 5000, "id"),
        ],
        ids=["index-too-big", "index-too-small", "nul-id", "surrogate-time", "not-a-time", "huge-key"],
    )
    async def test_a_tampered_position_is_an_invalid_cursor_error(
        self, state_adapter: StateAdapter, now: datetime, listing: str, key: object, item: str
    ) -> None:
        """A cursor re-signed with the query's own fingerprint but a hostile position."""
        await five_chains(state_adapter, now)
        build = dict(LISTINGS)[listing]
        params = build()
        forged = _foreign_cursor({"q": query_fingerprint(params), "k": [key, item]})
        with pytest.raises(InvalidCursorError):
            async with state_adapter.transaction(read_only=True) as tx:
                await getattr(tx, listing)(build(cursor=forged))

    async def test_exactly_full_last_page_has_no_next_cursor(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        await start(state_adapter, now=now)
        await start(state_adapter, now=at(now, 1))
        page = await chains(state_adapter, ChainsList(limit=2))
        assert len(page.items) == 2
        assert page.next_cursor is None

    async def test_newer_rows_inserted_between_pages_do_not_shift_later_pages(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        created = await five_chains(state_adapter, now)
        first = await chains(state_adapter, ChainsList(limit=2))
        assert chain_ids(first) == [created[4].id, created[3].id]
        await start(state_adapter, now=at(now, 10))
        second = await chains(state_adapter, ChainsList(limit=2, cursor=first.next_cursor))
        assert chain_ids(second) == [created[2].id, created[1].id]

    async def test_older_rows_inserted_between_pages_appear_in_order(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        created = [await start(state_adapter, now=at(now, 10 * n)) for n in range(1, 5)]
        first = await chains(state_adapter, ChainsList(limit=2))
        assert chain_ids(first) == [created[3].id, created[2].id]
        between = await start(state_adapter, now=at(now, 15))
        rest = await chains(state_adapter, ChainsList(limit=5, cursor=first.next_cursor))
        assert chain_ids(rest) == [created[1].id, between.id, created[0].id]

    async def test_deleting_the_cursor_row_does_not_break_pagination(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        created = await five_chains(state_adapter, now)
        first = await chains(state_adapter, ChainsList(limit=2, order="asc"))
        async with state_adapter.transaction() as tx:
            await tx.chains_delete(ChainsDelete(chain_ids=[created[1].id]))
        rest = await chains(state_adapter, ChainsList(limit=5, cursor=first.next_cursor, order="asc"))
        assert chain_ids(rest) == ids(created[2:])

    @pytest.mark.parametrize("order", ["asc", "desc"])
    async def test_rows_with_equal_timestamps_are_each_listed_once(
        self, state_adapter: StateAdapter, now: datetime, order: Any
    ) -> None:
        created = [
            created.job for created in await create(state_adapter, [new_job() for _ in range(7)], now=now)
        ]
        pages = await walk(lambda p: jobs(state_adapter, p), JobsList(limit=3, order=order))
        listed = [job.id for page in pages for job in page]
        assert sorted(listed) == sorted(ids(created)), "a row was skipped or listed twice"
        expected = sorted(listed, reverse=order == "desc")
        assert listed == expected, "ties on created_at must be ordered by id"
