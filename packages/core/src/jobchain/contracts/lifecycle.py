"""The job lifecycle: ``job_fail``, ``chains_cancel``, ``jobs_retry``, and ``jobs_trigger``.

Terminal statuses and what follows them:

* A chain's status is its last job's. A blocked job is always its chain's last job.
* **Fencing.** A worker's renewal, completion, reschedule or failure of a job that was
  cancelled meanwhile raises :class:`JobCancelledError` and changes nothing; of a job that
  another attempt failed, :class:`JobTakenByAnotherWorkerError`. A workerless completion,
  reschedule or failure of a failed or cancelled job raises :class:`JobFinishedError`.
* **Propagation.** When a chain becomes failed or cancelled (its last job does), every job in
  status ``blocked`` that declared it as a blocker reacts in the same operation: one created
  with ``runs_after_failed_blockers`` counts that blocker as resolved (it goes
  ``blocked → pending``, ``scheduled_at = max(scheduled_at, now)``, once every blocker chain
  is terminal); any other becomes ``failed`` (``failed_at = now``, ``failed_by_chain_id`` = the
  first of its declared blocker chains that is failed or cancelled once the operation is done,
  ``last_attempt_error`` = "blocker chain <id> (<type>) failed" or "... was cancelled" after
  that chain, and an :class:`AttemptError` of type ``BlockerChainFailed`` or
  ``BlockerChainCancelled`` appended, worker None, attempt = its current ``attempt``) — and its
  own chain failing propagates in turn, down the whole graph. Completion unblocking counts a
  failed or cancelled blocker as resolved for a ``runs_after_failed_blockers`` job too.
* **Error history.** ``attempt_errors`` keeps the last :data:`ATTEMPT_ERRORS_KEPT` entries,
  oldest first; an operation that appends one drops the oldest beyond that.

Part of the state contract (:class:`jobchain.contracts.StateTx`); every name is also importable
from ``jobchain.contracts`` and ``jobchain.contracts.state``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from jobchain.entities import AttemptError, Job, Schedule


@dataclass(frozen=True, slots=True, kw_only=True)
class JobFail:
    """Fail a job for good: status ``failed``, ``failed_at = last_attempt_at = now``, lease
    cleared, ``last_attempt_error = error``, ``attempt_error`` (if given) appended to the
    history; ``scheduled_at`` and the attempt counters unchanged.

    Fencing as :class:`JobReschedule`. Failure propagates to the jobs blocked by the job's
    chain in the same operation (this module's docstring, *Propagation*).
    """

    job_id: str
    error: str
    worker_id: str | None = None
    lease_generation: int | None = None
    attempt_error: AttemptError | None = None
    now: datetime | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class JobFailed:
    """The failed job and what its failure did downstream.

    ``failed_jobs``: jobs failed by propagation (every level), each its chain's last job, so
    each is a chain that just failed. ``unblocked_jobs``: ``runs_after_failed_blockers`` jobs
    that became pending.
    """

    job: Job
    failed_jobs: list[Job] = field(default_factory=list)
    unblocked_jobs: list[Job] = field(default_factory=list)
    previous_leased_by: str | None = None
    was_running: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class ChainsCancel:
    """Cancel chains: each chain's last job, if blocked, pending or running, becomes
    ``cancelled`` (``cancelled_at = now``, ``cancel_reason = reason``, lease cleared).

    All-or-nothing: if any id is not a chain or its chain is already terminal, nothing changes
    and the result lists them instead. Propagates like a failure (this module's docstring). A running
    job's attempt is fenced from then on; the adapter must not wait for that attempt to end
    even where it holds its job's row lock (atomic mode) — an engine that cannot avoid the
    wait (one writer at a time) documents it.
    """

    chain_ids: Sequence[str]
    reason: str | None = None
    now: datetime | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ChainsCancelled:
    """The cancelled jobs (each chain's last job, as it is now), which of them were running
    (their workers must be told: publish ownership lost), and the propagation."""

    cancelled: list[Job] = field(default_factory=list)
    running_job_ids: list[str] = field(default_factory=list)
    previous_leased_by: dict[str, str] = field(default_factory=dict)
    failed_jobs: list[Job] = field(default_factory=list)
    unblocked_jobs: list[Job] = field(default_factory=list)
    not_found: list[str] = field(default_factory=list)
    not_cancellable: list[tuple[str, str]] = field(default_factory=list)
    """(chain id, its status) for each chain that is already completed, failed or cancelled."""


@dataclass(frozen=True, slots=True, kw_only=True)
class JobsRetry:
    """Redrive failed or cancelled jobs with a fresh attempt budget; the history stays.

    Each job: ``attempt_base = attempt``; ``failed_at``, ``cancelled_at``, ``cancel_reason``,
    ``failed_by_chain_id`` and the lease cleared; ``attempt``, ``attempt_errors`` and
    ``last_attempt_error`` kept; status ``pending`` at ``schedule`` (now if None, clamped to now)
    — or ``blocked`` while one of its blocker chains is not terminal.

    Dependents follow: every job that failed because of a retried job's chain
    (``failed_by_chain_id``), and recursively theirs, goes back to ``blocked`` with the same
    resets (its open blockers counted again). All-or-nothing: a missing id, a job that is not
    failed or cancelled, or one whose failure came from a blocker chain that is still failed or
    cancelled, changes nothing and is listed instead. A job not created with
    ``runs_after_failed_blockers`` that has any failed or cancelled blocker chain is refused
    the same way (``blocked_by_failed`` names its ``failed_by_chain_id`` if that chain is still
    failed or cancelled, else the first such blocker chain declared); a dependent that would
    follow but has another failed or cancelled blocker chain stays ``failed`` with
    ``failed_by_chain_id`` = the first such chain declared (retrying it brings the dependent
    back).
    """

    job_ids: Sequence[str]
    schedule: Schedule | None = None
    now: datetime | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class JobsRetried:
    """The retried jobs, the dependents returned to ``blocked`` with them, and the refusals."""

    retried: list[Job] = field(default_factory=list)
    reblocked: list[Job] = field(default_factory=list)
    not_found: list[str] = field(default_factory=list)
    not_retryable: list[tuple[str, str]] = field(default_factory=list)
    """(job id, its status) for each job that is not failed or cancelled."""
    blocked_by_failed: list[tuple[str, str]] = field(default_factory=list)
    """(job id, blocker chain id) for each job whose ``failed_by_chain_id`` chain is still
    failed or cancelled: retry that chain instead."""


@dataclass(frozen=True, slots=True, kw_only=True)
class JobsTrigger:
    """Make pending jobs eligible now. All-or-nothing: nothing changes if any id is missing
    or not pending; the result reports them instead of raising."""

    job_ids: Sequence[str]
    now: datetime | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class JobsTriggered:
    triggered: list[Job] = field(default_factory=list)
    not_found: list[str] = field(default_factory=list)
    not_triggerable: list[tuple[str, str]] = field(default_factory=list)
