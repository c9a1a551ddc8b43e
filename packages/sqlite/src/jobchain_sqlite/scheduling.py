"""The scheduling operations of the state contract (``contracts.scheduling``) on SQLite:
job_wait (dynamic blockers), pausing types, and the registry of periodic schedules.

Each runs in the caller's write transaction, which holds SQLite's write lock from BEGIN
IMMEDIATE to COMMIT, so a lookup and the writes after it see one state:

- ``job_wait``: one read of the job, one of the blocker chains (job_wait_lookup), then the
  new blocker rows, the job's UPDATE, and propagation only when the wait failed the job and
  its chain blocks others;
- ``types_pause``: one upsert (pause) or one UPDATE (resume); ``paused_types_list``: one read;
- ``schedules_register``: one upsert, plus one DELETE with ``forget_before``, plus the read
  of the rows; ``schedules_list``: one read.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from jobchain.contracts.scheduling import (
    JobWait,
    JobWaited,
    PausedTypesList,
    SchedulesList,
    SchedulesRegister,
    TypesPause,
)
from jobchain.entities import (
    ATTEMPT_ERRORS_KEPT,
    AttemptError,
    Job,
    JobStatus,
    PausedType,
    ScheduleRecord,
    utcnow,
    validate_id,
)
from jobchain.errors import ChainNotFoundError, InvalidArgumentError
from jobchain_sqlite.complete import lease_error
from jobchain_sqlite.context import TxContext
from jobchain_sqlite.lifecycle import propagate
from jobchain_sqlite.rows import (
    Row,
    attempt_error_json,
    fmt_time,
    job_from_row,
    json_list,
    opt_time,
    parse_time,
)

_TERMINAL = frozenset({"completed", "failed", "cancelled"})
_ENDED_BADLY = frozenset({"failed", "cancelled"})


async def job_wait(ctx: TxContext, params: JobWait) -> JobWaited:
    """See StateTx.job_wait: fencing as job_reschedule, then the wait (or the failure)."""
    ctx.require_write("job_wait")
    now = params.now or utcnow()
    rows = await ctx.fetch(ctx.q.job_get, {"job_id": params.job_id})
    job = job_from_row(rows[0]) if rows else None
    if (
        job is None
        or job.status is not JobStatus.RUNNING
        or job.leased_by != params.worker_id
        or (params.lease_generation is not None and job.lease_generation != params.lease_generation)
    ):
        raise lease_error(params.job_id, params.worker_id, job)
    requested = list(dict.fromkeys(validate_id(chain_id) for chain_id in params.blocker_chain_ids))
    if job.chain_id in requested:
        raise InvalidArgumentError(f"job {job.id} cannot wait for its own chain {job.chain_id}")
    found = await ctx.fetch(ctx.q.job_wait_lookup, {"chain_ids": json_list(requested), "job_id": job.id})
    chains = {row["chain_id"]: row for row in found if row["kind"] == "chain"}
    existing = sorted((row for row in found if row["kind"] == "blocker"), key=lambda row: row["idx"])
    for chain_id in requested:
        if chain_id not in chains:
            raise ChainNotFoundError(chain_id)
    declared = {row["chain_id"] for row in existing}
    added = [chain_id for chain_id in requested if chain_id not in declared]
    next_idx = max((row["idx"] for row in existing), default=-1) + 1
    any_end = 1 if params.runs_after_failed else 0

    failed_by: Row | None = None
    if not params.runs_after_failed and not job.runs_after_failed_blockers:
        failed_by = next((chains[c] for c in added if chains[c]["status"] in _ENDED_BADLY), None)
    statuses: list[tuple[str, str]] = [(row["chain_id"], row["status"]) for row in existing]
    statuses += [(chain_id, chains[chain_id]["status"]) for chain_id in added]
    incomplete = tuple(chain_id for chain_id, status in statuses if status not in _TERMINAL)

    if added:
        blockers = [
            {"job_id": job.id, "chain_id": chain_id, "idx": next_idx + n, "any_end": any_end}
            for n, chain_id in enumerate(added)
        ]
        await ctx.fetch(ctx.q.job_blockers_add, {"blockers": json.dumps(blockers, separators=(",", ":"))})
    args: dict[str, object] = {
        "job_id": job.id,
        "worker_id": params.worker_id,
        "now": fmt_time(now),
        "status": "blocked" if incomplete else "pending",
        "failed_by": None,
        "error": None,
        "attempt_error": None,
        "errors_kept": ATTEMPT_ERRORS_KEPT,
    }
    if failed_by is not None:
        cancelled = failed_by["status"] == "cancelled"
        message = (
            f"blocker chain {failed_by['chain_id']} ({failed_by['chain_type_name']}) "
            f"{'was cancelled' if cancelled else 'failed'}"
        )
        entry = AttemptError(
            attempt=job.attempt,
            worker_id=None,
            error_type="BlockerChainCancelled" if cancelled else "BlockerChainFailed",
            message=message,
            at=now,
        )
        args |= {
            "status": "failed",
            "failed_by": failed_by["chain_id"],
            "error": message,
            "attempt_error": attempt_error_json(entry),
        }
    updated = await ctx.fetch(ctx.q.job_wait, args)
    if not updated:  # the lease was checked under the write lock: only a joined tx gets here
        raise lease_error(params.job_id, params.worker_id, await _job_get(ctx, params.job_id))
    waited = job_from_row(updated[0])
    if failed_by is None:
        return JobWaited(job=waited, incomplete_blocker_chain_ids=incomplete)
    failed: list[Job] = []
    unblocked: list[Job] = []
    if updated[0]["is_blocker"]:
        failed, unblocked = await propagate(ctx, [(waited.chain_id, "failed")], now)
    return JobWaited(
        job=waited, incomplete_blocker_chain_ids=incomplete, failed_jobs=failed, unblocked_jobs=unblocked
    )


async def _job_get(ctx: TxContext, job_id: str) -> Job | None:
    rows = await ctx.fetch(ctx.q.job_get, {"job_id": job_id})
    return job_from_row(rows[0]) if rows else None


def _paused(rows: Sequence[Row]) -> list[PausedType]:
    found = [PausedType(type_name=row["type_name"], paused_at=parse_time(row["paused_at"])) for row in rows]
    return sorted(found, key=lambda paused: paused.type_name)


async def types_pause(ctx: TxContext, params: TypesPause) -> list[PausedType]:
    """Pause or resume; the paused types among ``type_names`` afterwards, by name."""
    ctx.require_write("types_pause")
    names = list(dict.fromkeys(params.type_names))
    if not names:
        return []
    if not params.paused:
        await ctx.fetch(ctx.q.types_resume, {"type_names": json_list(names)})
        return []
    now = params.now or utcnow()
    return _paused(await ctx.fetch(ctx.q.types_pause, {"type_names": json_list(names), "now": fmt_time(now)}))


async def paused_types_list(ctx: TxContext, params: PausedTypesList) -> list[PausedType]:
    return _paused(await ctx.fetch(ctx.q.paused_types_list))


def _schedule(row: Row) -> ScheduleRecord:
    return ScheduleRecord(
        name=row["name"],
        cron=row["cron"],
        timezone=row["timezone"],
        type_name=row["type_name"],
        catch_up=bool(row["catch_up"]),
        worker_name=row["worker_name"],
        registered_at=parse_time(row["registered_at"]),
        last_seen_at=parse_time(row["last_seen_at"]),
        last_tick_at=None if row["last_tick_at"] is None else parse_time(row["last_tick_at"]),
        last_chain_id=row["last_chain_id"],
        next_tick_at=None if row["next_tick_at"] is None else parse_time(row["next_tick_at"]),
    )


async def schedules_register(ctx: TxContext, params: SchedulesRegister) -> list[ScheduleRecord]:
    """Upsert each schedule, forget the stale ones; the registered rows by name."""
    ctx.require_write("schedules_register")
    now = fmt_time(params.now or utcnow())
    items = [
        [
            s.name,
            s.cron,
            s.timezone,
            s.type_name,
            1 if s.catch_up else 0,
            s.worker_name,
            opt_time(s.next_tick_at),
            opt_time(s.last_tick_at),
            s.last_chain_id,
        ]
        for s in params.schedules
    ]
    names = json_list(dict.fromkeys(s.name for s in params.schedules))
    if items:
        await ctx.fetch(
            ctx.q.schedules_register, {"items": json.dumps(items, separators=(",", ":")), "now": now}
        )
    if params.forget_before is not None:
        await ctx.fetch(
            ctx.q.schedules_forget, {"forget_before": fmt_time(params.forget_before), "names": names}
        )
    if not items:
        return []
    return [_schedule(row) for row in await ctx.fetch(ctx.q.schedules_list, {"every": 0, "names": names})]


async def schedules_list(ctx: TxContext, params: SchedulesList) -> list[ScheduleRecord]:
    return [_schedule(row) for row in await ctx.fetch(ctx.q.schedules_list, {"every": 1, "names": "[]"})]


__all__ = ["job_wait", "paused_types_list", "schedules_list", "schedules_register", "types_pause"]
