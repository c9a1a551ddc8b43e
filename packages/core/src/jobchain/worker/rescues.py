"""Reporting rescued jobs: wake-ups after commit, one readable INFO line, one event per job.

A job is rescued when its attempt was abandoned without its worker's word: the lease
expired (the reaper) or the worker holding it stopped heartbeating (a heartbeat releasing
dead workers). The job is ``pending`` again, with ``rescued_at``, ``rescued_from`` and
``rescue_reason`` recorded on its row.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from jobchain.entities import Job
from jobchain.transactions import TransactionHooks

MAX_IDS_PER_LINE = 10
"""Job ids a rescue log line names before it says how many more there were."""


class Emit(Protocol):
    """Hands a worker event to the observers and, unless ``log_line=False``, to the event log.

    ``log_line=False`` is for failures a :class:`~jobchain.worker.outage.FailureStreak` already
    logs once per streak: observers still get every event, the log is not flooded.
    """

    def __call__(self, name: str, attributes: dict[str, Any], /, *, log_line: bool = True) -> None: ...


def publish_rescued(hooks: TransactionHooks, jobs: Sequence[Job]) -> None:
    """Buffer, in the rescuing transaction, what goes out after its commit.

    *Job scheduled* wakes a worker for each type; *ownership lost* aborts the abandoned
    attempt at once if its worker is in fact still running (its writes are fenced anyway).
    """
    counts: dict[str, int] = {}
    for job in jobs:
        counts[job.type_name] = counts.get(job.type_name, 0) + 1
        hooks.ownership_lost(job.id)
    for type_name, count in counts.items():
        hooks.job_scheduled(type_name, count)


def job_list(jobs: Sequence[Job], limit: int = MAX_IDS_PER_LINE) -> str:
    """``id (type), …`` for at most ``limit`` jobs, then how many more."""
    named = ", ".join(f"{job.id} ({job.type_name})" for job in jobs[:limit])
    more = len(jobs) - limit
    return f"{named}, … and {more} more" if more > 0 else named


def emit_rescued(emit: Emit, jobs: Sequence[Job], reason: str) -> None:
    """One ``job_rescued`` event per job, with the abandoned attempt's worker and the reason."""
    for job in jobs:
        emit(
            "job_rescued",
            {
                "job.id": job.id,
                "job.type": job.type_name,
                "chain.id": job.chain_id,
                "job.attempt": job.attempt,
                "rescued_from": job.rescued_from,
                "reason": job.rescue_reason or reason,
            },
        )
