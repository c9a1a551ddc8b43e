"""jobs_create: deduplication, continuations, blockers and the batch insert.

Three statements at most, whatever the batch size: one read (jobs_create_lookup) that finds
colliding ids, existing continuations, chain roots, deduplication matches and blocker chain
states; one multi-row INSERT; one multi-row blocker INSERT (only when some job declares
blockers). SQLite has no writable CTEs, so the three cannot be a single statement; the write
lock taken at BEGIN IMMEDIATE keeps the read and the writes consistent.

A batch of plain new chains (no deduplication, no blockers, no continuation) has nothing to
look up: it is the INSERT alone, whose primary key catches a colliding id. On a collision
(the statement then inserted nothing) the batch takes the general path, whose lookup names
the colliding id exactly as it always has.

The returned jobs are built from the values inserted, never read back: a new job's stored
columns are exactly those values (created_at is ``now``; the rest hold their defaults).
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

import msgspec

from jobchain.contracts.state import JobCreated, JobsCreate, NewJob
from jobchain.entities import CANONICAL_ID, Job, JobStatus, JsonValue, utcnow, validate_id
from jobchain.errors import ChainNotFoundError, DuplicateJobIdError, InvalidArgumentError, JobchainError
from jobchain_sqlite.context import TxContext
from jobchain_sqlite.create_lifecycle import decide_blockers, failed_at_insert, write_extras
from jobchain_sqlite.errors import is_constraint_violation
from jobchain_sqlite.rows import dump_json, fmt_time, job_from_row, json_list, parse_time


@dataclass(slots=True)
class _Lookup:
    """What the database already holds for one batch."""

    existing_ids: set[str] = field(default_factory=set)
    continuations: dict[int, Job] = field(default_factory=dict)
    roots: set[str] = field(default_factory=set)
    dedup: dict[int, Job] = field(default_factory=dict)
    blocker_status: dict[str, JobStatus] = field(default_factory=dict)
    blocker_type: dict[str, str] = field(default_factory=dict)
    ordering: dict[str, str] = field(default_factory=dict)
    """Ordering key -> the chain that took it last (its status is in blocker_status)."""


def _validate(jobs: list[NewJob]) -> bool:
    """Check ids and chain indexes; True when every job is a plain root (new chain, no
    deduplication, no blockers, not runs_after_failed_blockers, no ordering key)."""
    canonical = CANONICAL_ID.fullmatch  # what validate_id accepts at once, without a call
    plain = True
    for job in jobs:
        job_id = job.id
        if type(job_id) is not str or not canonical(job_id):
            validate_id(job_id)
        if job.chain_id is not None:
            plain = False
            validate_id(job.chain_id)
            if job.chain_index < 1:
                raise InvalidArgumentError(
                    f"continuation {job.id} of chain {job.chain_id} needs chain_index >= 1, "
                    f"got {job.chain_index}"
                )
        elif job.chain_index != 0:
            raise InvalidArgumentError(f"a new chain's first job has chain_index 0, got {job.chain_index}")
        if job.blocker_chain_ids:
            plain = False
            for chain_id in job.blocker_chain_ids:
                validate_id(chain_id)
        if job.deduplication is not None or job.runs_after_failed_blockers:
            plain = False
        if job.ordering_key is not None:  # a continuation's is ignored (roots only carry keys)
            plain = False
    return plain


def _lookup_items(jobs: list[NewJob], now: datetime) -> str:
    items: list[dict[str, Any]] = []
    for i, job in enumerate(jobs):
        dedup = job.deduplication if job.chain_id is None else None
        items.append(
            {
                "i": i,
                "id": job.id,
                "chain_id": job.chain_id,
                "chain_index": job.chain_index,
                "chain_type_name": job.chain_type_name,
                "dedup_key": dedup.key if dedup else None,
                "dedup_from": fmt_time(now - dedup.window) if dedup and dedup.window else None,
                "dedup_incomplete": 1 if dedup and dedup.scope == "incomplete" else 0,
                "exclude": list(dedup.exclude_chain_ids) if dedup else [],
            }
        )
    return json.dumps(items, separators=(",", ":"))


async def _lookup(ctx: TxContext, jobs: list[NewJob], now: datetime) -> _Lookup:
    blocker_ids = list(dict.fromkeys(c for job in jobs for c in job.blocker_chain_ids))
    keys = list(
        dict.fromkeys(j.ordering_key for j in jobs if j.ordering_key is not None and j.chain_id is None)
    )
    rows = await ctx.fetch(
        ctx.q.jobs_create_lookup,
        {
            "items": _lookup_items(jobs, now),
            "blocker_chain_ids": json_list(blocker_ids),
            "ordering_keys": json_list(keys),
        },
    )
    found = _Lookup()
    for row in rows:
        kind = row["kind"]
        if kind == "id":
            found.existing_ids.add(row["id"])
        elif kind == "continuation":
            found.continuations[row["i"]] = job_from_row(row)
        elif kind == "root":
            found.roots.add(row["id"])
        elif kind == "dedup":
            found.dedup[row["i"]] = job_from_row(row)
        elif kind == "ordering":
            found.ordering[row["i"]] = row["chain_id"]
            found.blocker_status[row["chain_id"]] = JobStatus(row["status"])
            found.blocker_type[row["chain_id"]] = row["chain_type_name"]
        else:
            found.blocker_status[row["chain_id"]] = JobStatus(row["status"])
            found.blocker_type[row["chain_id"]] = row["chain_type_name"]
    return found


async def jobs_create(ctx: TxContext, params: JobsCreate) -> list[JobCreated]:
    """See StateTx.jobs_create: results in input order; deduplicated items carry the existing job."""
    ctx.require_write("jobs_create")
    jobs = list(params.jobs)
    if not jobs:
        return []
    plain = _validate(jobs)
    now = params.now or utcnow()
    if plain:
        created = await _create_plain_roots(ctx, jobs, now)
        if created is not None:
            return created
    return await _create(ctx, jobs, now)


async def _create_plain_roots(ctx: TxContext, jobs: list[NewJob], now: datetime) -> list[JobCreated] | None:
    """Insert new chains that need no lookup; None when an id collides (the caller then
    takes the general path, which reports the collision)."""
    if len({job.id for job in jobs}) != len(jobs):
        return None
    now_text = fmt_time(now)
    # What _insert_item does, for roots without deduplication or blockers.
    items: list[list[Any]] = []
    for job in jobs:
        job_id = job.id
        value, schedule = job.input, job.schedule
        trace, chain_trace = job.trace_context, job.chain_trace_context
        items.append(
            [
                job_id,
                job.type_name,
                job_id,
                job.chain_type_name,
                0,
                "pending",
                None if value is None else dump_json(value, f"input of job {job_id}"),
                now_text if schedule is None else fmt_time(schedule.resolve(now)),
                None,
                None if trace is None else dump_json(trace, "trace_context"),
                None if chain_trace is None else dump_json(chain_trace, "chain_trace_context"),
            ]
        )
        if job.priority:
            items[-1].append(job.priority)
    params = {"jobs": _dump_items(items), "now": now_text}
    try:
        if len(jobs) < _OVERLAP_FROM or ctx.driven:  # driven: no loop to run the insert's task
            await ctx.fetch(ctx.q.jobs_create, params)
            return _plain_roots_created(jobs, items, now_text)
        # The jobs to return are built while the database thread inserts the rows (SQLite
        # runs without the GIL): the insert is queued first, then this task builds, then waits.
        insert = asyncio.ensure_future(ctx.fetch(ctx.q.jobs_create, params))
        try:
            await asyncio.sleep(0)  # the insert's task runs first and hands the statement over
            created = _plain_roots_created(jobs, items, now_text)
            await insert
        except BaseException:
            insert.cancel()  # as if it had been awaited directly; a no-op once it is done
            raise
    except JobchainError as error:
        # A colliding id fails the primary key or, for an existing chain's id, the unique
        # (chain_id, chain_index) index first. One statement: nothing of the batch was inserted.
        if is_constraint_violation(error):
            return None
        raise
    return created


_OVERLAP_FROM = 64
"""Batches from this size build their jobs during the insert; below, a task costs more than it saves."""


def _plain_roots_created(jobs: list[NewJob], items: list[list[Any]], now_text: str) -> list[JobCreated]:
    """What _inserted_job returns for each plain root of ``items``, in one pass."""
    created_at = parse_time(now_text)
    created: list[JobCreated] = []
    for job, item in zip(jobs, items, strict=True):
        job_id = job.id
        value = job.input
        scheduled_text = item[7]
        trace, chain_trace = job.trace_context, job.chain_trace_context
        created.append(
            JobCreated(
                job=Job(
                    id=job_id,
                    chain_id=job_id,
                    type_name=job.type_name,
                    chain_type_name=job.chain_type_name,
                    chain_index=0,
                    status=_PENDING,
                    input=value if value is None else _stored(value, item[6]),
                    created_at=created_at,
                    scheduled_at=created_at if scheduled_text == now_text else parse_time(scheduled_text),
                    trace_context=trace if trace is None else _stored(trace, item[9]),
                    chain_trace_context=chain_trace
                    if chain_trace is None
                    else _stored(chain_trace, item[10]),
                    priority=job.priority,
                )
            )
        )
    return created


async def _create(ctx: TxContext, jobs: list[NewJob], now: datetime) -> list[JobCreated]:
    found = await _lookup(ctx, jobs, now)

    results: list[JobCreated | None] = [None] * len(jobs)
    same_as: dict[int, int] = {}  # item index -> index of the earlier item it collapses onto
    first_dedup: dict[tuple[str, str], int] = {}
    first_continuation: dict[tuple[str, int], int] = {}
    inserted: dict[str, int] = {}  # job id -> item index, for jobs this batch inserts
    for i, job in enumerate(jobs):
        if job.chain_id is None:
            dedup = job.deduplication
            if dedup is not None:
                key = (dedup.key, job.chain_type_name)
                if key in first_dedup:
                    same_as[i] = first_dedup[key]
                    continue
                first_dedup[key] = i
                if i in found.dedup:
                    results[i] = JobCreated(job=found.dedup[i], deduplicated=True)
                    continue
        else:
            ckey = (job.chain_id, job.chain_index)
            if ckey in first_continuation:
                same_as[i] = first_continuation[ckey]
                continue
            first_continuation[ckey] = i
            if i in found.continuations:
                results[i] = JobCreated(job=found.continuations[i], deduplicated=True)
                continue
            if job.chain_id not in found.roots and job.chain_id not in inserted:
                raise ChainNotFoundError(job.chain_id)
        if job.id in found.existing_ids or job.id in inserted:
            raise DuplicateJobIdError(job.id)
        inserted[job.id] = i

    ordered_after, key_rows = _ordering(jobs, inserted, found.ordering)
    implicit = {i: c for i, c in ordered_after.items() if c not in jobs[i].blocker_chain_ids}
    decisions = decide_blockers(jobs, inserted, found.blocker_status, found.blocker_type, implicit)
    now_text = fmt_time(now)
    rows: list[list[Any]] = []
    blocker_rows: list[dict[str, Any]] = []
    for job_id, i in inserted.items():
        job = jobs[i]
        blockers = list(dict.fromkeys(job.blocker_chain_ids))
        blocker_rows.extend({"job_id": job_id, "chain_id": c, "idx": n} for n, c in enumerate(blockers))
        if i in implicit:  # the implicit blocker, after the declared ones
            blocker_rows.append(
                {"job_id": job_id, "chain_id": implicit[i], "idx": len(blockers), "any_end": 1}
            )
        rows.append(_insert_item(job, now, now_text, status=decisions[i].status))

    if rows:
        await ctx.fetch(
            ctx.q.jobs_create,
            {"jobs": _dump_items(rows), "now": now_text},
            job_ids=list(inserted),
        )
        created_at = parse_time(now_text)
        new_jobs: list[Job] = []
        for item, i in zip(rows, inserted.values(), strict=True):
            new_job = _inserted_job(jobs[i], item, created_at, now_text)
            failed_by = decisions[i].failed_by
            if failed_by is not None:
                new_job = failed_at_insert(new_job, failed_by, now)
            new_jobs.append(new_job)
            results[i] = JobCreated(
                job=new_job,
                incomplete_blocker_chain_ids=decisions[i].incomplete,
                ordered_after=ordered_after.get(i),
            )
        await write_extras(ctx, new_jobs)
    if blocker_rows:
        await ctx.fetch(ctx.q.job_blockers_add, {"blockers": json.dumps(blocker_rows, separators=(",", ":"))})
    if key_rows:
        await ctx.fetch(
            ctx.q.ordering_keys_upsert, {"keys": json.dumps(key_rows, separators=(",", ":")), "now": now_text}
        )

    for i, target in same_as.items():
        earlier = results[target]
        assert earlier is not None  # items only collapse onto earlier, resolved ones
        results[i] = replace(earlier, deduplicated=True, incomplete_blocker_chain_ids=(), ordered_after=None)
    return [result for result in results if result is not None]


def _ordering(
    jobs: list[NewJob], inserted: dict[str, int], last_of_key: dict[str, str]
) -> tuple[dict[int, str], list[list[str | None]]]:
    """The previous chain of each inserted root with an ordering key (by item index), and the
    ordering_key rows to upsert ([key, last chain, previous chain]).

    Roots of one key in the batch follow each other in input order; deduplicated items are
    not inserted, so they take no place.
    """
    after: dict[int, str] = {}
    last = dict(last_of_key)
    previous: dict[str, str | None] = {}
    for job_id, i in inserted.items():
        key = jobs[i].ordering_key
        if key is None or jobs[i].chain_id is not None:
            continue
        before = last.get(key)
        previous[key] = before
        last[key] = job_id
        if before is not None:
            after[i] = before
    return after, [[key, last[key], before] for key, before in previous.items()]


_encode_items = msgspec.json.Encoder().encode


def _dump_items(items: list[list[Any]]) -> str:
    """The JSON array of insert items (strings, integers and None only).

    msgspec writes it about four times faster than ``json.dumps``; SQLite reads both the
    same. A lone surrogate (which UTF-8 cannot carry) gets ``json.dumps``'s escape, as before.
    """
    try:
        return _encode_items(items).decode()
    except UnicodeEncodeError:
        return json.dumps(items, separators=(",", ":"))


def _insert_item(job: NewJob, now: datetime, now_text: str, *, status: str) -> list[Any]:
    """The values jobs_create.sql inserts for ``job``, in its item order."""
    dedup = job.deduplication  # stored on continuations too; only roots are matched
    return [
        job.id,
        job.type_name,
        job.chain_id or job.id,
        job.chain_type_name,
        job.chain_index,
        status,
        dump_json(job.input, f"input of job {job.id}"),
        now_text if job.schedule is None else fmt_time(job.schedule.resolve(now)),
        dedup.key if dedup else None,
        dump_json(job.trace_context, "trace_context"),
        dump_json(job.chain_trace_context, "chain_trace_context"),
        job.priority,
        job.ordering_key if job.chain_id is None else None,
    ]


_PENDING = JobStatus.PENDING
_STATUS_OF = {status.value: status for status in JobStatus}
_SAME_AFTER_JSON = (str, int, float, bool)  # json.loads(json.dumps(v)) == v, same type


def _stored(value: JsonValue, text: str | None) -> JsonValue:
    """What reading the column back gives: ``value`` as JSON decodes its stored ``text``."""
    if text is None:
        return None
    if type(value) in _SAME_AFTER_JSON:
        return value
    loaded: JsonValue = json.loads(text)
    return loaded


def _inserted_job(job: NewJob, item: list[Any], created_at: datetime, now_text: str) -> Job:
    """The Job a read of the row just inserted from ``item`` would return."""
    scheduled_text: str = item[7]
    return Job(
        id=job.id,
        chain_id=item[2],
        type_name=job.type_name,
        chain_type_name=job.chain_type_name,
        chain_index=job.chain_index,
        status=_STATUS_OF[item[5]],
        input=_stored(job.input, item[6]),
        created_at=created_at,
        scheduled_at=created_at if scheduled_text == now_text else parse_time(scheduled_text),
        deduplication_key=item[8],
        trace_context=_stored(job.trace_context, item[9]),
        chain_trace_context=_stored(job.chain_trace_context, item[10]),
        runs_after_failed_blockers=job.runs_after_failed_blockers,
        priority=job.priority,
        ordering_key=item[12],
    )


__all__ = ["jobs_create"]
