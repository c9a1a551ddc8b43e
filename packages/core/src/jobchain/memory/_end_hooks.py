"""Failure and cancel hooks of the in-process state backend (state contract, ``end_hooks``).

:func:`started_by` is the in-process twin of the SQL backends' trigger: every job write goes
through ``Ctx.put``, which calls it with the row before and after, so whichever operation sets
a job's ``failed_at`` or ``cancelled_at`` starts the registered hook jobs in its own
transaction (and a rollback takes them back with the rest).
"""

from __future__ import annotations

from datetime import UTC, datetime

import msgspec

from jobchain.contracts.end_hooks import EndHooksRegister, TypeEndHooks
from jobchain.end_hooks import JobEnded
from jobchain.entities import Job, JobStatus, JsonValue, new_id
from jobchain.memory._store import Store, TxState


def end_hooks_register(store: Store, tx: TxState, params: EndHooksRegister) -> None:
    """Upsert each type's row (in order: a name given twice ends as its last)."""
    table = store.end_hooks
    for name in sorted({row.type_name for row in params.types}):  # one lock order
        store.lock_table(tx, table, name)
    for row in params.types:
        table.put(tx, row.type_name, row)


def started_by(store: Store, tx: TxState, old: Job | None, new: Job) -> list[Job]:
    """The hook jobs that writing ``new`` over ``old`` starts (none unless it just ended badly)."""
    # failed_at and cancelled_at are set once per ending (a retry clears them), so a job that
    # fails again after a retry starts its hook again, and a rewrite of an ended row never does.
    newly_failed = new.failed_at is not None and (old is None or old.failed_at is None)
    newly_cancelled = new.cancelled_at is not None and (old is None or old.cancelled_at is None)
    if new.status is JobStatus.FAILED and newly_failed and new.failed_at is not None:
        event, at = "failed", new.failed_at
    elif new.status is JobStatus.CANCELLED and newly_cancelled and new.cancelled_at is not None:
        event, at = "cancelled", new.cancelled_at
    else:
        return []
    table = store.end_hooks
    started: list[Job] = []
    for scope, owner in (("job", new.type_name), ("chain", new.chain_type_name)):
        row = table.get(tx, owner)
        field = f"on_{event}" if scope == "job" else f"on_chain_{event}"
        hook: str | None = None if row is None else getattr(row, field)
        if hook is not None:
            started.append(_hook_job(table.get(tx, hook), hook, _input(new, event, scope, at), at))
    return started


def _input(job: Job, event: str, scope: str, at: datetime) -> JsonValue:
    failed = event == "failed"
    ended = JobEnded(
        event="failed" if failed else "cancelled",
        scope="job" if scope == "job" else "chain",
        job_id=job.id,
        type_name=job.type_name,
        chain_id=job.chain_id,
        chain_type_name=job.chain_type_name,
        at=at,
        error=job.last_attempt_error if failed else None,
        error_type=job.attempt_errors[-1].error_type if failed and job.attempt_errors else None,
        reason=None if failed else job.cancel_reason,
        failed_by_chain_id=job.failed_by_chain_id if failed else None,
    )
    value: dict[str, JsonValue] = msgspec.to_builtins(ended)
    # As the SQL backends store it: UTC, microseconds always, an explicit offset.
    value["at"] = at.astimezone(UTC).isoformat(timespec="microseconds")
    return value


def _hook_job(row: TypeEndHooks | None, hook: str, value: JsonValue, at: datetime) -> Job:
    job_id = new_id()
    return Job(
        id=job_id,
        chain_id=job_id,
        type_name=hook,
        chain_type_name=hook,
        chain_index=0,
        status=JobStatus.PENDING,
        input=value,
        created_at=at,
        scheduled_at=at,
        priority=0 if row is None else row.priority,
    )


__all__ = ["end_hooks_register", "started_by"]
