"""The read operations and keyset-paginated listings, written once against a :class:`View`."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime, timedelta
from itertools import islice
from typing import Any, TypeVar

from jobchain.contracts.state import BlockedJobsList, ChainJobsList, ChainsList, JobsList
from jobchain.entities import Chain, Job, JobStatus, Page
from jobchain.errors import InvalidCursorError
from jobchain.memory._store import CreatedKey, created_key
from jobchain.memory._views import View, beyond
from jobchain.pagination import decode_cursor, encode_cursor

T = TypeVar("T")


def job_blockers(view: View, job_id: str) -> list[Chain]:
    return [chain for chain_id in view.blockers(job_id) if (chain := view.chain(chain_id)) is not None]


def job_next_available(view: View, type_names: Iterable[str], now: datetime) -> timedelta | None:
    earliest = view.next_scheduled(type_names)
    return None if earliest is None else max(timedelta(0), earliest - now)


# ---------------------------------------------------------------- cursors


def _time_value(at: datetime) -> str:
    return at.astimezone(UTC).isoformat()


def _time_position(params: Any) -> CreatedKey | None:
    """The ``(created_at, id)`` a time-ordered listing continues after (None on page one)."""
    position = decode_cursor(params)
    if position is None:
        return None
    value, item_id = position
    try:
        at = datetime.fromisoformat(value) if isinstance(value, str) else None
    except ValueError:
        at = None
    if at is None or at.tzinfo is None:
        raise InvalidCursorError(f"cursor {params.cursor!r} does not carry a creation time")
    return (at, item_id)


def _page(params: Any, items: Iterator[T], key_of: Callable[[T], tuple[str | int, str]]) -> Page[T]:
    """Take ``limit`` items plus one to learn whether a next page exists."""
    taken = list(islice(items, params.limit + 1))
    if len(taken) <= params.limit:
        return Page(items=taken)
    taken = taken[: params.limit]
    sort_value, item_id = key_of(taken[-1])
    return Page(items=taken, next_cursor=encode_cursor(params, sort_value, item_id))


def _job_cursor_key(job: Job) -> tuple[str, str]:
    return (_time_value(job.created_at), job.id)


def _in_order(jobs: Iterable[Job], *, descending: bool, after: CreatedKey | None) -> Iterator[Job]:
    """A small candidate set, sorted and positioned like :meth:`View.walk`."""
    chosen = [job for job in jobs if beyond(created_key(job), after, descending)]
    chosen.sort(key=created_key, reverse=descending)
    return iter(chosen)


def _within(
    jobs: Iterator[Job], *, descending: bool, created_from: datetime | None, created_to: datetime | None
) -> Iterator[Job]:
    """Keep jobs created inside the inclusive bounds; stop once the walk has passed them."""
    for job in jobs:
        if created_from is not None and job.created_at < created_from:
            if descending:
                return
            continue
        if created_to is not None and job.created_at > created_to:
            if not descending:
                return
            continue
        yield job


# ---------------------------------------------------------------- listings


def chains_list(view: View, params: ChainsList) -> Page[Chain]:
    descending = params.order == "desc"
    after = _time_position(params)
    wanted: set[str] | None = set(params.chain_ids) if params.chain_ids else None
    if params.job_ids:
        of_jobs = {job.chain_id for job_id in params.job_ids if (job := view.job(job_id)) is not None}
        wanted = of_jobs if wanted is None else wanted & of_jobs
    if wanted is not None:
        roots = (job for chain_id in wanted if (job := view.job(chain_id)) is not None and job.is_root)
        source = _in_order(roots, descending=descending, after=after)
    else:
        source = view.walk(roots=True, descending=descending, after=after)
    type_names = set(params.type_names)
    statuses = set(params.statuses)

    def chains() -> Iterator[Chain]:
        for root in _within(
            source, descending=descending, created_from=params.created_from, created_to=params.created_to
        ):
            if type_names and root.chain_type_name not in type_names:
                continue
            if params.root_only and view.is_blocker(root.id):
                continue
            chain = view.chain(root.id)
            if chain is None or (statuses and chain.last.status not in statuses):
                continue
            yield chain

    return _page(params, chains(), lambda chain: _job_cursor_key(chain.root))


def jobs_list(view: View, params: JobsList) -> Page[Job]:
    descending = params.order == "desc"
    after = _time_position(params)
    wanted: set[str] | None = set(params.job_ids) if params.job_ids else None
    if params.chain_ids:
        of_chains = {job.id for chain_id in set(params.chain_ids) for job in view.chain_jobs(chain_id)}
        wanted = of_chains if wanted is None else wanted & of_chains
    if wanted is not None:
        found = (job for job_id in wanted if (job := view.job(job_id)) is not None)
        source = _in_order(found, descending=descending, after=after)
    else:
        source = view.walk(roots=False, descending=descending, after=after)
    type_names = set(params.type_names)
    chain_type_names = set(params.chain_type_names)
    statuses = set(params.statuses)
    error_types = set(params.error_types)
    leased_by = set(params.leased_by)

    def jobs() -> Iterator[Job]:
        for job in _within(
            source, descending=descending, created_from=params.created_from, created_to=params.created_to
        ):
            if type_names and job.type_name not in type_names:
                continue
            if chain_type_names and job.chain_type_name not in chain_type_names:
                continue
            if statuses and job.status not in statuses:
                continue
            if error_types and (
                not job.attempt_errors or job.attempt_errors[-1].error_type not in error_types
            ):
                continue
            if leased_by and (job.status is not JobStatus.RUNNING or job.leased_by not in leased_by):
                continue
            yield job

    return _page(params, jobs(), _job_cursor_key)


def chain_jobs_list(view: View, params: ChainJobsList) -> Page[Job]:
    descending = params.order == "desc"
    position = decode_cursor(params)
    jobs = view.chain_jobs(params.chain_id)
    if descending:
        jobs.reverse()
    if position is not None:
        index = position[0]
        if not isinstance(index, int) or isinstance(index, bool):
            raise InvalidCursorError(f"cursor {params.cursor!r} does not carry a chain index")
        jobs = [job for job in jobs if (job.chain_index < index if descending else job.chain_index > index)]
    return _page(params, iter(jobs), lambda job: (job.chain_index, job.id))


def blocked_jobs_list(view: View, params: BlockedJobsList) -> Page[Job]:
    descending = params.order == "desc"
    after = _time_position(params)
    jobs = _in_order(view.dependents(params.blocker_chain_id), descending=descending, after=after)
    return _page(params, jobs, _job_cursor_key)
