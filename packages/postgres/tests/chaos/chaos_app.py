"""The application the chaos workers run: ``python -m jobchain.cli worker chaos_app:processors``.

Every execution of a handler appends one line ``job_id pid attempt type started_at`` to the
file named by ``CHAOS_EXEC_LOG`` (``O_APPEND``: lines from concurrent processes never
interleave), so re-executions are counted, and timed, even when the process dies before its
transaction commits. The handler then works in atomic mode and, inside the attempt
transaction, inserts a row into ``chaos_audit``: that row commits together with the
completion or not at all, so two rows for one job mean two committed completions.

Two job types, one handler: ``chaos.work`` and ``chaos.long`` (the mixed-lease cell serves
both; they differ only in their declared leases). Timing knobs (environment, read at import;
unset means the library default): ``CHAOS_LEASE_SECONDS`` (lease of ``chaos.work``),
``CHAOS_LONG_LEASE_SECONDS`` (lease of ``chaos.long``), ``CHAOS_RETRY_SECONDS`` (first retry
delay; it doubles up to four times that); ``CHAOS_WORK_SECONDS`` (time spent inside the attempt
transaction, default 0.3). Input ``{"fail_first": true}`` makes the first attempt of a job raise
(the retry-storm cell).

A third type, ``chaos.limited`` (``max_running`` = ``CHAOS_LIMIT``, default 2), has a
*cooperative* handler for the stall and partition cells: staged, it works in ``CHAOS_STEPS``
steps of ``CHAOS_STEP_SECONDS``, reads its abort signal before each and stops when it fired,
and appends ``job_id pid attempt step_at`` to ``CHAOS_STEP_LOG`` for each step it takes: the
audit finds from those lines how many limited jobs did work at once.
"""

from __future__ import annotations

import asyncio
import os
import time
from datetime import timedelta
from typing import Any, Final, cast

from jobchain import JobTypes, Transaction
from jobchain.worker import Attempt, Backoff, Completed, LeaseConfig, Processors
from jobchain_postgres._tx import PostgresStateTx

WORK: Final = float(os.environ.get("CHAOS_WORK_SECONDS", "0.3"))
EXEC_LOG: Final = os.environ.get("CHAOS_EXEC_LOG", os.devnull)
TYPE_NAME: Final = "chaos.work"
LONG_TYPE_NAME: Final = "chaos.long"
LIMITED_TYPE_NAME: Final = "chaos.limited"
LIMIT: Final = int(os.environ.get("CHAOS_LIMIT", "2"))
STEPS: Final = int(os.environ.get("CHAOS_STEPS", "10"))
STEP: Final = float(os.environ.get("CHAOS_STEP_SECONDS", "0.1"))
STEP_LOG: Final = os.environ.get("CHAOS_STEP_LOG", os.devnull)


def _seconds(variable: str) -> float | None:
    value = os.environ.get(variable, "").strip()
    return float(value) if value else None


def _lease(variable: str) -> LeaseConfig | None:
    seconds = _seconds(variable)
    if seconds is None:
        return None
    return LeaseConfig(duration=timedelta(seconds=seconds), renew_every=timedelta(seconds=seconds / 3))


def _retry() -> Backoff | None:
    seconds = _seconds("CHAOS_RETRY_SECONDS")
    if seconds is None:
        return None
    return Backoff(initial=timedelta(seconds=seconds), maximum=timedelta(seconds=seconds * 4))


job_types = JobTypes(retry=_retry())
work = job_types.define(TYPE_NAME, input=dict, output=dict, entry=True, lease=_lease("CHAOS_LEASE_SECONDS"))
long = job_types.define(
    LONG_TYPE_NAME, input=dict, output=dict, entry=True, lease=_lease("CHAOS_LONG_LEASE_SECONDS")
)
limited = job_types.define(
    LIMITED_TYPE_NAME,
    input=dict,
    output=dict,
    entry=True,
    lease=_lease("CHAOS_LEASE_SECONDS"),
    max_running=LIMIT,
)
processors = Processors()


class InjectedFailureError(Exception):
    """The first attempt of a ``fail_first`` job fails on purpose."""


def _append(path: str, line: str) -> None:
    """One write on an O_APPEND descriptor: lines of concurrent processes never interleave."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def log_execution(job_id: str, attempt: int, type_name: str) -> None:
    """Append ``job_id pid attempt type started_at`` to the execution log."""
    _append(EXEC_LOG, f"{job_id} {os.getpid()} {attempt} {type_name} {time.time():.6f}\n")


async def handle(attempt: Attempt[dict[str, Any], dict[str, Any]]) -> Completed:
    job = attempt.job
    log_execution(job.id, job.attempt, job.type_name)
    await attempt.prepare("atomic")  # the transaction stays open through the work below
    await asyncio.sleep(WORK)
    if attempt.input.get("fail_first") and job.attempt <= 1:
        raise InjectedFailureError(f"first attempt of {job.id} fails on purpose")

    async def audit(tx: Transaction) -> None:
        await _audit_row(tx, job.id, job.attempt)

    return await attempt.complete({"pid": os.getpid()}, callback=audit)


async def _audit_row(tx: Transaction, job_id: str, attempt: int) -> None:
    state = cast(PostgresStateTx, tx.state)  # the chaos suite runs on PostgreSQL only
    await state.connection.execute(
        "INSERT INTO chaos_audit (job_id, pid, attempt) VALUES (%s, %s, %s)", (job_id, os.getpid(), attempt)
    )


async def handle_limited(attempt: Attempt[dict[str, Any], dict[str, Any]]) -> Completed:
    """Cooperative: every step reads the abort signal first, and none is taken once it fired."""
    job = attempt.job
    log_execution(job.id, job.attempt, job.type_name)
    await attempt.prepare("staged")
    for _ in range(STEPS):
        attempt.signal.raise_if_aborted()
        _append(STEP_LOG, f"{job.id} {os.getpid()} {job.attempt} {time.time():.6f}\n")
        await asyncio.sleep(STEP)
    attempt.signal.raise_if_aborted()

    async def audit(tx: Transaction) -> None:
        await _audit_row(tx, job.id, job.attempt)

    return await attempt.complete({"pid": os.getpid()}, callback=audit)


processors.register(work, handle)
processors.register(long, handle)
processors.register(limited, handle_limited)
