"""The four keyset-paginated listings of PostgresStateTx (one statement each, limit + 1 rows).

Cursors are the shared opaque cursors of :mod:`jobchain.pagination`, bound to the query that
produced them; time-ordered listings carry the ISO creation time, chain jobs their index.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, TypeVar

from jobchain.contracts.state import BlockedJobsList, ChainJobsList, ChainsList, JobsList
from jobchain.entities import Chain, Job, Page
from jobchain.errors import InvalidArgumentError, InvalidCursorError
from jobchain.pagination import decode_cursor, encode_cursor
from jobchain_postgres.queries import Queries
from jobchain_postgres.rows import Row, Shape, uuid_or_none, uuids

T = TypeVar("T")

__all__ = ["ListingsMixin"]


def _time_value(at: datetime) -> str:
    return at.astimezone(UTC).isoformat()


def _time_position(params: Any) -> tuple[datetime | None, str | None]:
    position = decode_cursor(params)
    if position is None:
        return None, None
    value, item_id = position
    try:
        at = datetime.fromisoformat(value) if isinstance(value, str) else None
    except ValueError:
        at = None
    canonical = uuid_or_none(item_id)
    if at is None or at.tzinfo is None or canonical is None:
        raise InvalidCursorError(f"cursor {params.cursor!r} does not carry a creation time and id")
    return at, canonical


def _aware(name: str, value: datetime | None) -> datetime | None:
    if value is not None and value.tzinfo is None:
        raise InvalidArgumentError(f"{name} must be timezone-aware (use datetime.now(timezone.utc))")
    return value


def _filter(values: Sequence[str]) -> list[str] | None:
    """A ``= ANY`` filter; None (no filter) when empty."""
    return list(values) if values else None


def _id_filter(values: Sequence[str]) -> list[str] | None:
    """An id filter: ids that cannot be UUIDs match nothing (an empty array, not "no filter")."""
    return uuids(values) if values else None


def _page(
    params: Any, rows: list[Row], make: Callable[[Row], T], key: Callable[[T], tuple[str | int, str]]
) -> Page[T]:
    items = [make(row) for row in rows]
    if len(items) <= params.limit:
        return Page(items=items)
    items = items[: params.limit]
    sort_value, item_id = key(items[-1])
    return Page(items=items, next_cursor=encode_cursor(params, sort_value, item_id))


RARE_STATUSES = frozenset({"blocked", "running", "failed", "cancelled"})
"""The statuses job_listing_status_idx holds (pending and completed jobs are plentiful)."""


def _rare_status(statuses: Sequence[str]) -> str | None:
    """The one rare status a listing asks for, which the partial status index serves; else None."""
    unique = set(statuses)
    return unique.pop() if len(unique) == 1 and unique <= RARE_STATUSES else None


def _created_key(job: Job) -> tuple[str, str]:
    return _time_value(job.created_at), job.id


class ListingsMixin:
    """Listing operations; the transaction class supplies ``_q`` and ``_rows``."""

    _q: Queries

    async def _rows(
        self, query: bytes, params: Mapping[str, Any], *, write: bool, ids: Sequence[str] = ()
    ) -> tuple[Shape, list[Row]]:
        raise NotImplementedError  # pragma: no cover - provided by PostgresStateTx

    async def chains_list(self, params: ChainsList) -> Page[Chain]:
        after_at, after_id = _time_position(params)
        shape, rows = await self._rows(
            self._q.listing("chains_list", params.order),
            {
                "type_names": _filter(params.type_names),
                "chain_ids": _id_filter(params.chain_ids),
                "job_ids": _id_filter(params.job_ids),
                "statuses": _filter([str(s) for s in params.statuses]),
                "root_only": bool(params.root_only),
                "created_from": _aware("created_from", params.created_from),
                "created_to": _aware("created_to", params.created_to),
                "after_at": after_at,
                "after_id": after_id,
                "limit": params.limit + 1,
            },
            write=False,
        )

        def chain(row: Row) -> Chain:
            root, last = shape.must_job(row, 0), shape.must_job(row, 1)
            return Chain(root, last)

        return _page(params, rows, chain, lambda c: _created_key(c.root))

    async def jobs_list(self, params: JobsList) -> Page[Job]:
        after_at, after_id = _time_position(params)
        statuses = [str(s) for s in params.statuses]
        shape, rows = await self._rows(
            self._q.listing("jobs_list", params.order),
            {
                "type_names": _filter(params.type_names),
                "chain_type_names": _filter(params.chain_type_names),
                "chain_ids": _id_filter(params.chain_ids),
                "job_ids": _id_filter(params.job_ids),
                "statuses": _filter(statuses),
                "rare_status": _rare_status(statuses),
                "error_types": _filter(params.error_types),
                "leased_by": _filter(params.leased_by),
                "created_from": _aware("created_from", params.created_from),
                "created_to": _aware("created_to", params.created_to),
                "after_at": after_at,
                "after_id": after_id,
                "limit": params.limit + 1,
            },
            write=False,
        )
        return _page(params, rows, shape.must_job, _created_key)

    async def chain_jobs_list(self, params: ChainJobsList) -> Page[Job]:
        position = decode_cursor(params)
        after_index: int | None = None
        if position is not None:
            index = position[0]
            if not isinstance(index, int) or isinstance(index, bool):
                raise InvalidCursorError(f"cursor {params.cursor!r} does not carry a chain index")
            after_index = index
        chain_id = uuid_or_none(params.chain_id)
        if chain_id is None:
            return Page(items=[])
        shape, rows = await self._rows(
            self._q.listing("chain_jobs_list", params.order),
            {"chain_id": chain_id, "after_index": after_index, "limit": params.limit + 1},
            write=False,
        )
        return _page(params, rows, shape.must_job, lambda job: (job.chain_index, job.id))

    async def blocked_jobs_list(self, params: BlockedJobsList) -> Page[Job]:
        after_at, after_id = _time_position(params)
        chain_id = uuid_or_none(params.blocker_chain_id)
        if chain_id is None:
            return Page(items=[])
        shape, rows = await self._rows(
            self._q.listing("blocked_jobs_list", params.order),
            {"chain_id": chain_id, "after_at": after_at, "after_id": after_id, "limit": params.limit + 1},
            write=False,
        )
        return _page(params, rows, shape.must_job, _created_key)
