"""The dashboard's pages (GET): overview, chains, one chain, jobs by status, workers, schedules."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from jobchain.client import Client
from jobchain.contracts.state import MAX_PAGE_SIZE
from jobchain.dashboard.charts import blocker_graph, throughput_chart
from jobchain.dashboard.context import client_of, render
from jobchain.entities import Chain, Job, JobStatus, WorkerState, utcnow, validate_id
from jobchain.error_groups import SHOWN_GROUPS, ErrorGroup, group_errors
from jobchain.errors import InvalidArgumentError, InvalidJobIdError, JobchainError
from jobchain.job_types import validate_type_name

logger = logging.getLogger("jobchain.dashboard")

THROUGHPUT_WINDOW: Final = timedelta(hours=1)
THROUGHPUT_STEP: Final = timedelta(minutes=1)
LIVE: Final = (WorkerState.RUNNING, WorkerState.DRAINING)
NOTICES: Final = {
    "retried": "Job {} retried.",
    "cancelled": "Chain {} cancelled.",
    "deleted": "Chain {} deleted.",
    "retried_all": "{} chains retried.",
    "retried_more": "{} chains retried; more match: retry all again to go on.",
    "paused": "Job type {} paused: no worker claims it until it is resumed.",
    "resumed": "Job type {} resumed.",
}
COUNTED: Final = frozenset({"retried_all", "retried_more"})
MAX_COUNT_DIGITS: Final = 12
"""A counted notice's subject longer than this is shown as 0 (a count is never that long)."""
NAMED: Final = frozenset({"paused", "resumed"})
"""Notices whose subject is a job type name (shown only if it is one)."""
STALE_AFTER: Final = timedelta(days=1)
"""A schedule no worker registered for this long is marked stale (as ``jobchain schedules``)."""
MAX_CHAIN_BLOCKER_READS: Final = 50
"""A chain page reads the blockers of at most this many of its jobs (one read each)."""
GROUPED_JOBS: Final = 2 * MAX_PAGE_SIZE
"""The failed-jobs page groups the last errors of at most this many failed jobs (the newest)
matching its filters, in two reads."""


def notice(request: Request) -> str | None:
    """The confirmation of the action that redirected here (fixed texts, an id or a count)."""
    done = request.query_params.get("done", "")
    template = NOTICES.get(done)
    subject = request.query_params.get("subject", "")
    if template is None:
        return None
    if done in COUNTED:
        # ASCII digits only, and few: int() refuses "²" and numbers of over 4300 digits.
        counted = subject.isascii() and subject.isdigit() and len(subject) <= MAX_COUNT_DIGITS
        return template.format(int(subject) if counted else 0)
    if done in NAMED:
        try:
            return template.format(validate_type_name(subject))
        except InvalidArgumentError:
            return template.format("").replace("  ", " ")
    try:
        return template.format(validate_id(subject))
    except InvalidJobIdError:
        return template.format("").replace("  ", " ")


def _page_size(request: Request) -> int:
    size: int = request.app.state.jobchain_settings.page_size
    return size


def parse_time(name: str, text: str | None) -> datetime | None:
    """A filter time: ISO 8601; without an offset it is UTC (what the form's inputs send)."""
    if not text:
        return None
    try:
        value = datetime.fromisoformat(text.strip())
    except ValueError:
        raise InvalidArgumentError(
            f"{name} must be a date and time such as 2026-11-26T08:30 (UTC), got {text!r}"
        ) from None
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def parse_status(text: str | None, default: str | None = None) -> str | None:
    value = (text or "").strip() or default
    if value is None:
        return None
    if value not in {s.value for s in JobStatus}:
        valid = ", ".join(s.value for s in JobStatus)
        raise InvalidArgumentError(f"status must be one of {valid}, got {value!r}")
    return value


# ---------------------------------------------------------------- overview


async def overview(request: Request) -> Response:
    client = await client_of(request)
    stats = await client.queue_stats(throughput_window=THROUGHPUT_WINDOW, throughput_step=THROUGHPUT_STEP)
    workers = await client.list_workers(states=list(LIVE))
    return render(
        request,
        "overview.html",
        {
            "page": "overview",
            "stats": stats,
            "now": stats.now,
            "chart": throughput_chart(stats.throughput, THROUGHPUT_STEP),
            "workers": workers,
            "notice": notice(request),
            "refresh": True,
        },
    )


# ---------------------------------------------------------------- chains


async def chains(request: Request) -> Response:
    client = await client_of(request)
    query = request.query_params
    filters = {key: query.get(key, "") for key in ("type", "status", "created_from", "created_to")}
    error = None
    items: list[Chain] = []
    next_cursor = None
    status_code = 200
    try:
        status = parse_status(filters["status"])
        page = await client.list_chains(
            type_names=[filters["type"].strip()] if filters["type"].strip() else [],
            statuses=[status] if status else [],
            created_from=parse_time("created_from", filters["created_from"]),
            created_to=parse_time("created_to", filters["created_to"]),
            cursor=query.get("cursor") or None,
            limit=_page_size(request),
        )
        items, next_cursor = page.items, page.next_cursor
    except InvalidArgumentError as exc:
        error, status_code = str(exc), 400
    return render(
        request,
        "chains.html",
        {
            "page": "chains",
            "chains": items,
            "filters": filters,
            "next_cursor": next_cursor,
            "paged": bool(query.get("cursor")),
            "error": error,
            "statuses": [s.value for s in JobStatus],
            "now": utcnow(),
            "notice": notice(request),
        },
        status_code,
    )


async def chain(request: Request) -> Response:
    client = await client_of(request)
    try:
        chain_id = validate_id(request.path_params["chain_id"])
    except InvalidJobIdError:
        raise HTTPException(404, "no such chain: the id is not a job id") from None
    found = await client.get_chain(chain_id)
    if found is None:
        raise HTTPException(404, f"chain {chain_id} not found (it may have been deleted)")
    jobs_page = await client.list_chain_jobs(chain_id, limit=MAX_PAGE_SIZE)
    jobs = jobs_page.items
    blockers = {job.id: await client.get_job_blockers(job.id) for job in jobs[:MAX_CHAIN_BLOCKER_READS]}
    dependents = (await client.list_blocked_jobs(chain_id, limit=100)).items
    base = request.scope.get("root_path", "")
    return render(
        request,
        "chain.html",
        {
            "page": "chains",
            "chain": found,
            "jobs": jobs,
            "more_jobs": jobs_page.next_cursor is not None,
            "blockers": blockers,
            "dependents": dependents,
            "graph": blocker_graph(base, jobs, blockers, dependents),
            "now": utcnow(),
            "notice": notice(request),
        },
    )


# ---------------------------------------------------------------- jobs by status


async def jobs(request: Request) -> Response:
    """Jobs of one status (failed by default: the dead letters), with their actions."""
    client = await client_of(request)
    query = request.query_params
    filters = {key: query.get(key, "") for key in ("status", "type", "error_type")}
    error = None
    items: list[Any] = []
    next_cursor = None
    status_code = 200
    status = "failed"
    groups: list[ErrorGroup] = []
    grouped, more = 0, False
    try:
        status = parse_status(filters["status"], "failed") or "failed"
        filters["status"] = status
        page = await client.list_jobs(
            statuses=[status],
            type_names=[filters["type"].strip()] if filters["type"].strip() else [],
            error_types=[filters["error_type"].strip()] if filters["error_type"].strip() else [],
            cursor=query.get("cursor") or None,
            limit=_page_size(request),
        )
        items, next_cursor = page.items, page.next_cursor
        if status == "failed":
            groups, grouped, more = await _error_groups(client, filters)
    except InvalidArgumentError as exc:
        error, status_code = str(exc), 400
    return render(
        request,
        "jobs.html",
        {
            "page": "jobs",
            "jobs": items,
            "groups": groups[:SHOWN_GROUPS],
            "hidden_groups": max(len(groups) - SHOWN_GROUPS, 0),
            "grouped": grouped,
            "grouped_more": more,
            "status": status,
            "filters": filters,
            "next_cursor": next_cursor,
            "paged": bool(query.get("cursor")),
            "error": error,
            "statuses": [s.value for s in JobStatus],
            "now": utcnow(),
            "notice": notice(request),
        },
        status_code,
    )


async def _error_groups(client: Client, filters: dict[str, str]) -> tuple[list[ErrorGroup], int, bool]:
    """Error groups of the newest :data:`GROUPED_JOBS` failed jobs matching ``filters``: the
    groups, how many jobs were read, and whether more jobs match than were read."""
    read: list[Job] = []
    cursor: str | None = None
    while len(read) < GROUPED_JOBS:
        page = await client.list_jobs(
            statuses=["failed"],
            type_names=[filters["type"].strip()] if filters["type"].strip() else [],
            error_types=[filters["error_type"].strip()] if filters["error_type"].strip() else [],
            cursor=cursor,
            limit=min(MAX_PAGE_SIZE, GROUPED_JOBS - len(read)),
        )
        read.extend(page.items)
        cursor = page.next_cursor
        if cursor is None:
            break
    return group_errors(read), len(read), cursor is not None


# ---------------------------------------------------------------- workers


async def workers(request: Request) -> Response:
    client = await client_of(request)
    found = await client.list_workers()
    held = {}
    for worker in found:
        if worker.state in LIVE:
            held[worker.id] = (await client.list_jobs(statuses=["running"], leased_by=[worker.id])).items
    return render(
        request,
        "workers.html",
        {
            "page": "workers",
            "workers": found,
            "held": held,
            "now": utcnow(),
            "notice": notice(request),
            "refresh": True,
        },
    )


# ---------------------------------------------------------------- schedules


async def schedules(request: Request) -> Response:
    """The periodic schedules workers registered, with their next run and last tick."""
    client = await client_of(request)
    records = await client.list_schedules()
    now = utcnow()
    return render(
        request,
        "schedules.html",
        {
            "page": "schedules",
            "schedules": records,
            "stale": {r.name for r in records if now - r.last_seen_at > STALE_AFTER},
            "now": now,
            "notice": notice(request),
            "refresh": True,
        },
    )


# ---------------------------------------------------------------- errors


async def http_error(request: Request, exc: Exception) -> Response:
    """404, 403, 400...: the page says why (the texts are ours, escaped all the same)."""
    status = exc.status_code if isinstance(exc, HTTPException) else 500
    detail = exc.detail if isinstance(exc, HTTPException) else "error"
    if status == 404 and detail == "Not Found":
        detail = "no such page"
    return _error_page(request, status, str(detail))


async def server_error(request: Request, exc: Exception) -> Response:
    """503 with the backend's explanation for a jobchain error, else 500; both logged.

    A request that has not logged in is told only that, never the backend's text (it names
    the database, its host and user).
    """
    if isinstance(exc, JobchainError):
        # The backend's own explanation (passwords are masked in every jobchain error).
        logger.warning("dashboard request failed: %s", exc)
        if not _authenticated(request):
            return _error_page(request, 503, "the state backend failed; see the server's log")
        return _error_page(request, 503, " ".join(str(exc).split()))
    logger.exception("dashboard request failed")
    return _error_page(request, 500, "internal error; see the server's log")


def _authenticated(request: Request) -> bool:
    return bool(request.scope.get("state", {}).get("jobchain_authenticated", False))


def _error_page(request: Request, status: int, message: str) -> Response:
    """The error page (base.html shows no navigation nor state label unless logged in)."""
    if "jobchain_session" not in request.scope.get("state", {}):
        from starlette.responses import PlainTextResponse

        return PlainTextResponse(message, status_code=status)
    response = render(request, "error.html", {"page": "", "status": status, "message": message}, status)
    # Set here too: an error under /static (a missing file) is a page, never to be cached.
    response.headers["Cache-Control"] = "no-store"
    return response


__all__ = ["chain", "chains", "jobs", "http_error", "overview", "schedules", "server_error", "workers"]
