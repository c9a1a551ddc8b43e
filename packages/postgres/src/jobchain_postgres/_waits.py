"""job_wait (dynamic blockers, issue 19): a running job waits for chains, one round trip.

Sent as one pipeline like job_fail: the job's row lock (``sql/job_fail_lock.sql``), the decision
(``sql/job_wait.sql``), then the propagation (``sql/jobs_propagate.sql``) of the job's chain if
an already failed or cancelled blocker failed it.
"""

from __future__ import annotations

from typing import Any

from jobchain.contracts.scheduling import JobWait, JobWaited
from jobchain.entities import ATTEMPT_ERRORS_KEPT, new_id
from jobchain.errors import ChainNotFoundError, InvalidArgumentError, JobNotFoundError, TransientStateError
from jobchain_postgres._lifecycle import LifecycleMixin
from jobchain_postgres._results import check_now, owned_result
from jobchain_postgres.rows import uuid_or_none

__all__ = ["WaitsMixin"]

_STALE_RUNS = 16
"""Statements one job_wait may send while its blocker chains keep ending under it."""


class WaitsMixin(LifecycleMixin):
    """``job_wait``; the transaction class supplies the plumbing (see LifecycleMixin)."""

    async def job_wait(self, params: JobWait) -> JobWaited:
        """A running job waits for chains; its attempt ends without using its budget."""
        job_id = uuid_or_none(params.job_id)
        self._check(write=True)
        if job_id is None:
            raise JobNotFoundError(params.job_id)
        # An id that is no UUID names no chain: a fresh id stands for it in the statement (so
        # fencing is still decided first) and is reported under the caller's spelling.
        spelled: dict[str, str] = {}
        chain_ids: list[str] = []
        for given in dict.fromkeys(params.blocker_chain_ids):
            canonical = uuid_or_none(given)
            if canonical is None:
                canonical = new_id()
            spelled.setdefault(canonical, given)
            chain_ids.append(canonical)
        now = check_now(params.now)
        decision: dict[str, Any] = {
            "job_id": job_id,
            "worker_id": params.worker_id,
            "lease_generation": params.lease_generation,
            "chain_ids": chain_ids,
            "runs_after_failed": bool(params.runs_after_failed),
            "kept": ATTEMPT_ERRORS_KEPT,
            "now": now,
        }
        steps = [(self._q.job_fail_lock, {"job_id": job_id}), (self._q.job_wait, decision)]
        for _run in range(_STALE_RUNS):
            (shape, rows), failed, unblocked = await self._propagated(steps, now)
            problems: list[str] = (shape.scalar(rows[0], "_problems") if rows else None) or []
            # A blocker chain ended under the statement (it waited for that): nothing was
            # written; decide again with a fresh snapshot.
            if not any(p.startswith("stale:") for p in problems):
                break
        else:
            raise TransientStateError("a blocker chain kept changing while the job waited for it; retry")
        if "own_chain" in problems:
            raise InvalidArgumentError(f"job {params.job_id} cannot wait for its own chain")
        if problems:
            missing = problems[0].partition(":")[2]
            raise ChainNotFoundError(spelled.get(missing, missing))
        job = owned_result(shape, rows, params.job_id, params.worker_id)
        return JobWaited(
            job=job,
            incomplete_blocker_chain_ids=tuple(shape.scalar(rows[0], "_incomplete") or ()),
            failed_jobs=failed,
            unblocked_jobs=unblocked,
        )
