"""The application the chaos workers run: ``python -m jobchain.cli worker chaos_app:processors``.

Every execution of the handler appends one line ``job_id pid attempt`` to the file named by
``CHAOS_EXEC_LOG`` (``O_APPEND``: lines from concurrent processes never interleave), so
re-executions are counted even when the process dies before its transaction commits. The
handler then works in atomic mode and, inside the attempt transaction, inserts a row into
``chaos_audit``: that row commits together with the completion or not at all, so two rows
for one job mean two committed completions.

Timing knobs (environment, read at import): ``CHAOS_LEASE_SECONDS`` (lease of the type),
``CHAOS_WORK_SECONDS`` (time spent inside the attempt transaction), ``CHAOS_RETRY_SECONDS``
(first retry delay; it doubles up to four times that). Input ``{"fail_first": true}`` makes
the first attempt of a job raise (the retry-storm cell).
"""

from __future__ import annotations

import asyncio
import os
from datetime import timedelta
from typing import Any, Final, cast

from jobchain import JobTypes, Transaction
from jobchain.worker import Attempt, Backoff, Completed, LeaseConfig, Processors
from jobchain_postgres._tx import PostgresStateTx

LEASE: Final = float(os.environ.get("CHAOS_LEASE_SECONDS", "5"))
WORK: Final = float(os.environ.get("CHAOS_WORK_SECONDS", "0.3"))
RETRY: Final = float(os.environ.get("CHAOS_RETRY_SECONDS", "0.5"))
EXEC_LOG: Final = os.environ.get("CHAOS_EXEC_LOG", os.devnull)
TYPE_NAME: Final = "chaos.work"

job_types = JobTypes(
    lease=LeaseConfig(duration=timedelta(seconds=LEASE), renew_every=timedelta(seconds=LEASE / 3)),
    retry=Backoff(initial=timedelta(seconds=RETRY), maximum=timedelta(seconds=RETRY * 4)),
)
work = job_types.define(TYPE_NAME, input=dict, output=dict, entry=True)
processors = Processors()


class InjectedFailureError(Exception):
    """The first attempt of a ``fail_first`` job fails on purpose."""


def log_execution(job_id: str, attempt: int) -> None:
    """Append ``job_id pid attempt`` with one write on an O_APPEND descriptor."""
    fd = os.open(EXEC_LOG, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{job_id} {os.getpid()} {attempt}\n".encode())
    finally:
        os.close(fd)


@processors.handler(work)
async def handle(attempt: Attempt[dict[str, Any], dict[str, Any]]) -> Completed:
    job = attempt.job
    log_execution(job.id, job.attempt)
    await attempt.prepare("atomic")  # the transaction stays open through the work below
    await asyncio.sleep(WORK)
    if attempt.input.get("fail_first") and job.attempt <= 1:
        raise InjectedFailureError(f"first attempt of {job.id} fails on purpose")

    async def audit(tx: Transaction) -> None:
        state = cast(PostgresStateTx, tx.state)  # the chaos suite runs on PostgreSQL only
        await state.connection.execute(
            "INSERT INTO chaos_audit (job_id, pid, attempt) VALUES (%s, %s, %s)",
            (job.id, os.getpid(), job.attempt),
        )

    return await attempt.complete({"pid": os.getpid()}, callback=audit)
