"""The four listings: keyset pagination over one statement each (limit + 1 rows).

Cursors come from jobchain.pagination and carry ``(sort value, id)``: the stored
``created_at`` text (fixed width, so it compares like the instant) or the ``chain_index``.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from jobchain.contracts.state import BlockedJobsList, ChainJobsList, ChainsList, JobsList
from jobchain.entities import Chain, Job, Page
from jobchain.errors import InvalidCursorError
from jobchain.pagination import decode_cursor, encode_cursor
from jobchain_sqlite.context import TxContext
from jobchain_sqlite.rows import chains_from_jobs, fmt_time, job_from_row, json_list, opt_time


def _after(params: Any, sort_type: type) -> dict[str, Any]:
    position = decode_cursor(params)
    if position is None:
        return {"after_key": None, "after_id": None}
    sort_value, item_id = position
    if not isinstance(sort_value, sort_type) or isinstance(sort_value, bool):
        raise InvalidCursorError("cursor is malformed; pass the next_cursor of the previous page")
    if isinstance(sort_value, str):
        # Time positions are compared as text: anything but a time would page silently wrong.
        try:
            at = datetime.fromisoformat(sort_value)
        except ValueError:
            at = None
        if at is None or at.tzinfo is None:
            raise InvalidCursorError(
                "cursor does not carry a creation time; pass the next_cursor of the previous page"
            )
        sort_value = fmt_time(at)
    return {"after_key": sort_value, "after_id": item_id}


def _bounds(created_from: datetime | None, created_to: datetime | None) -> dict[str, Any]:
    return {"created_from": opt_time(created_from), "created_to": opt_time(created_to)}


def _statuses(values: Sequence[str]) -> str:
    return json_list(str(v) for v in values)


def _page_of_jobs(params: Any, jobs: list[Job], by_index: bool = False) -> Page[Job]:
    limit: int = params.limit
    if len(jobs) <= limit:
        return Page(items=jobs)
    items = jobs[:limit]
    last = items[-1]
    sort_value: str | int = last.chain_index if by_index else fmt_time(last.created_at)
    return Page(items=items, next_cursor=encode_cursor(params, sort_value, last.id))


async def chains_list(ctx: TxContext, params: ChainsList) -> Page[Chain]:
    args = {
        "type_names": json_list(params.type_names),
        "chain_ids": json_list(params.chain_ids),
        "job_ids": json_list(params.job_ids),
        "statuses": _statuses(params.statuses),
        "root_only": params.root_only,
        "limit": params.limit,
        **_bounds(params.created_from, params.created_to),
        **_after(params, str),
    }
    rows = await ctx.fetch(ctx.q.listing("chains_list", params.order), args)
    chains = sorted(
        chains_from_jobs([job_from_row(row) for row in rows]).values(),
        key=lambda c: (c.created_at, c.id),
        reverse=params.order == "desc",
    )
    if len(chains) <= params.limit:
        return Page(items=chains)
    items = chains[: params.limit]
    last = items[-1]
    return Page(items=items, next_cursor=encode_cursor(params, fmt_time(last.created_at), last.id))


async def jobs_list(ctx: TxContext, params: JobsList) -> Page[Job]:
    args = {
        "type_names": json_list(params.type_names),
        "chain_type_names": json_list(params.chain_type_names),
        "chain_ids": json_list(params.chain_ids),
        "job_ids": json_list(params.job_ids),
        "statuses": _statuses(params.statuses),
        "error_types": json_list(params.error_types),
        "limit": params.limit,
        **_bounds(params.created_from, params.created_to),
        **_after(params, str),
    }
    if params.leased_by:  # a statement that starts from the running jobs (see its plan)
        args["leased_by"] = json_list(params.leased_by)
        rows = await ctx.fetch(ctx.q.listing("jobs_list_leased", params.order), args)
        return _page_of_jobs(params, [job_from_row(row) for row in rows])
    rows = await ctx.fetch(ctx.q.listing("jobs_list", params.order), args)
    return _page_of_jobs(params, [job_from_row(row) for row in rows])


async def chain_jobs_list(ctx: TxContext, params: ChainJobsList) -> Page[Job]:
    args = {"chain_id": params.chain_id, "limit": params.limit, **_after(params, int)}
    rows = await ctx.fetch(ctx.q.listing("chain_jobs_list", params.order), args)
    return _page_of_jobs(params, [job_from_row(row) for row in rows], by_index=True)


async def blocked_jobs_list(ctx: TxContext, params: BlockedJobsList) -> Page[Job]:
    args = {"blocker_chain_id": params.blocker_chain_id, "limit": params.limit, **_after(params, str)}
    rows = await ctx.fetch(ctx.q.listing("blocked_jobs_list", params.order), args)
    return _page_of_jobs(params, [job_from_row(row) for row in rows])


__all__ = ["blocked_jobs_list", "chain_jobs_list", "chains_list", "jobs_list"]
