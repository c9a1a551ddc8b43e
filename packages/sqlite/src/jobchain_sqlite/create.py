"""jobs_create: deduplication, continuations, blockers and the batch insert.

Three statements at most, whatever the batch size: one read (jobs_create_lookup) that finds
colliding ids, existing continuations, chain roots, deduplication matches and blocker chain
states; one multi-row INSERT … RETURNING; one multi-row blocker INSERT (only when some job
declares blockers). SQLite has no writable CTEs, so the three cannot be a single statement;
the write lock taken at BEGIN IMMEDIATE keeps the read and the writes consistent.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from jobchain.contracts.state import JobCreated, JobsCreate, NewJob
from jobchain.entities import Job, JobStatus, utcnow, validate_id
from jobchain.errors import ChainNotFoundError, DuplicateJobIdError, InvalidArgumentError
from jobchain_sqlite.context import TxContext
from jobchain_sqlite.rows import dump_json, fmt_time, job_from_row, json_list


@dataclass(slots=True)
class _Lookup:
    """What the database already holds for one batch."""

    existing_ids: set[str] = field(default_factory=set)
    continuations: dict[int, Job] = field(default_factory=dict)
    roots: set[str] = field(default_factory=set)
    dedup: dict[int, Job] = field(default_factory=dict)
    blocker_status: dict[str, JobStatus] = field(default_factory=dict)


def _validate(jobs: list[NewJob]) -> None:
    for job in jobs:
        validate_id(job.id)
        if job.chain_id is not None:
            validate_id(job.chain_id)
            if job.chain_index < 1:
                raise InvalidArgumentError(
                    f"continuation {job.id} of chain {job.chain_id} needs chain_index >= 1, "
                    f"got {job.chain_index}"
                )
        elif job.chain_index != 0:
            raise InvalidArgumentError(f"a new chain's first job has chain_index 0, got {job.chain_index}")
        for chain_id in job.blocker_chain_ids:
            validate_id(chain_id)


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
    rows = await ctx.fetch(
        ctx.q.jobs_create_lookup,
        {"items": _lookup_items(jobs, now), "blocker_chain_ids": json_list(blocker_ids)},
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
        else:
            found.blocker_status[row["chain_id"]] = JobStatus(row["status"])
    return found


async def jobs_create(ctx: TxContext, params: JobsCreate) -> list[JobCreated]:
    """See StateTx.jobs_create: results in input order; deduplicated items carry the existing job."""
    ctx.require_write("jobs_create")
    jobs = list(params.jobs)
    if not jobs:
        return []
    _validate(jobs)
    now = params.now or utcnow()
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

    new_chain_ids = {job_id for job_id, i in inserted.items() if jobs[i].chain_id is None}
    rows: list[dict[str, Any]] = []
    blocker_rows: list[dict[str, Any]] = []
    incomplete: dict[int, tuple[str, ...]] = {}
    for job_id, i in inserted.items():
        job = jobs[i]
        blockers = list(dict.fromkeys(job.blocker_chain_ids))
        for chain_id in blockers:
            if chain_id not in found.blocker_status and chain_id not in new_chain_ids:
                raise ChainNotFoundError(chain_id)
        incomplete[i] = tuple(
            c
            for c in blockers
            if c in new_chain_ids or found.blocker_status.get(c) is not JobStatus.COMPLETED
        )
        blocker_rows.extend({"job_id": job_id, "chain_id": c, "idx": n} for n, c in enumerate(blockers))
        rows.append(_insert_row(job, now, blocked=bool(incomplete[i])))

    if rows:
        returned = await ctx.fetch(
            ctx.q.jobs_create,
            {"jobs": json.dumps(rows, separators=(",", ":")), "now": fmt_time(now)},
            job_ids=list(inserted),
        )
        by_id = {row["id"]: job_from_row(row) for row in returned}
        for job_id, i in inserted.items():
            results[i] = JobCreated(job=by_id[job_id], incomplete_blocker_chain_ids=incomplete[i])
    if blocker_rows:
        await ctx.fetch(ctx.q.job_blockers_add, {"blockers": json.dumps(blocker_rows, separators=(",", ":"))})

    for i, target in same_as.items():
        earlier = results[target]
        assert earlier is not None  # items only collapse onto earlier, resolved ones
        results[i] = replace(earlier, deduplicated=True, incomplete_blocker_chain_ids=())
    return [result for result in results if result is not None]


def _insert_row(job: NewJob, now: datetime, *, blocked: bool) -> dict[str, Any]:
    scheduled = job.schedule.resolve(now) if job.schedule is not None else now
    dedup = job.deduplication  # stored on continuations too; only roots are matched
    return {
        "id": job.id,
        "type_name": job.type_name,
        "chain_id": job.chain_id or job.id,
        "chain_type_name": job.chain_type_name,
        "chain_index": job.chain_index,
        "status": "blocked" if blocked else "pending",
        "input": dump_json(job.input, f"input of job {job.id}"),
        "scheduled_at": fmt_time(scheduled),
        "deduplication_key": dedup.key if dedup else None,
        "trace_context": dump_json(job.trace_context, "trace_context"),
        "chain_trace_context": dump_json(job.chain_trace_context, "chain_trace_context"),
    }


__all__ = ["jobs_create"]
