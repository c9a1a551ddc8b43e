"""A claim and what its worker does with it: ``jobs_acquire``, ``job_renew_lease``,
``job_reschedule``, ``job_complete``; and the reaper, ``jobs_reap_expired``.

The claim rules (priorities and aging, limits, pause) are stated in
:mod:`jobchain.contracts.scheduling`; fencing of cancelled and failed jobs in
:mod:`jobchain.contracts.lifecycle`. Part of the state contract
(:class:`jobchain.contracts.StateTx`); every name is also importable from
``jobchain.contracts`` and ``jobchain.contracts.state``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from jobchain.contracts._validation import _check_timedelta
from jobchain.entities import PRIORITY_AGING, AttemptError, Job, JsonValue, Schedule, TypeLimits
from jobchain.errors import InvalidArgumentError


@dataclass(frozen=True, slots=True, kw_only=True)
class JobsAcquire:
    """Claim up to ``limit`` eligible pending jobs.

    Eligible: pending, ``scheduled_at <= now``, of a type in ``type_names`` that is not paused,
    and within the type's ``type_limits`` (``contracts.scheduling``, *Limits*).
    Order: first the jobs due since ``now - priority_aging`` or earlier (aged), by
    ``scheduled_at``, ``created_at``, ``id``; then the others by ``priority`` descending, then
    ``scheduled_at``, ``created_at``, ``id``. So a job of any priority waits at most
    ``priority_aging`` plus the time to claim the aged jobs ahead of it (its starvation bound).

    Claimed jobs become ``running`` with ``attempt + 1``, ``lease_generation + 1`` and a
    lease for ``worker_id`` until ``now + lease_for`` — or ``now + type_leases[type_name]``
    for a type listed there (a worker serving types with different leases claims them in one
    statement). Rows locked by other transactions are skipped, so concurrent callers never
    receive the same job.
    """

    type_names: Sequence[str]
    worker_id: str
    lease_for: timedelta
    limit: int = 1
    type_leases: Mapping[str, timedelta] = field(default_factory=dict)
    type_limits: Mapping[str, TypeLimits] = field(default_factory=dict)
    priority_aging: timedelta = PRIORITY_AGING
    now: datetime | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.limit, int) or self.limit < 1:
            raise InvalidArgumentError(f"acquire limit must be a positive integer, got {self.limit!r}")
        _check_timedelta("lease_for", self.lease_for, positive=True)
        _check_timedelta("priority_aging", self.priority_aging, positive=True)
        for type_name, lease in self.type_leases.items():
            _check_timedelta(f"type_leases[{type_name!r}]", lease, positive=True)

    def lease_of(self, type_name: str) -> timedelta:
        """The lease a claimed job of ``type_name`` gets."""
        return self.type_leases.get(type_name, self.lease_for)


@dataclass(frozen=True, slots=True, kw_only=True)
class JobsAcquired:
    """Claimed jobs and whether more eligible jobs were waiting beyond the limit.

    ``held_back``: the types whose limit capped this claim (it claimed all the limit allowed,
    fewer than asked: more may be waiting), in name order. ``retry_at``: for those capped by a
    rate limit, the earliest end of their current window (None if none was).
    """

    jobs: list[Job]
    has_more: bool
    held_back: tuple[str, ...] = ()
    retry_at: datetime | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class JobRenewLease:
    """Extend the caller's lease. Raises JobNotFoundError, JobAlreadyCompletedError or
    JobTakenByAnotherWorkerError (also on a stale ``lease_generation``) and changes nothing."""

    job_id: str
    worker_id: str
    lease_for: timedelta
    lease_generation: int | None = None
    now: datetime | None = None

    def __post_init__(self) -> None:
        _check_timedelta("lease_for", self.lease_for, positive=True)


@dataclass(frozen=True, slots=True, kw_only=True)
class JobReschedule:
    """Return a job to ``pending`` at ``schedule`` (clamped to now), recording ``error``.

    With ``worker_id`` the caller must own the lease (same errors as renewal, and
    JobCancelledError for a cancelled job); without it any blocked, pending or running job may
    be rescheduled (JobFinishedError for a failed or cancelled one). The lease is cleared;
    ``attempt_error``, if given, is appended to the error history.

    ``released=True`` hands back an attempt that did not fail (its worker shut down, or the
    job waited in a prefetch buffer): ``attempt_base + 1``, so the claim's attempt uses none
    of the budget (``attempts_used`` is as before the claim).
    """

    job_id: str
    schedule: Schedule
    error: str
    worker_id: str | None = None
    lease_generation: int | None = None
    attempt_error: AttemptError | None = None
    released: bool = False
    now: datetime | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class JobComplete:
    """Complete a job with ``output``; ``worker_id=None`` is a workerless completion.

    If no continuation (``chain_index + 1``) exists, the chain is complete and every job
    whose blockers are now all complete goes ``blocked → pending`` with
    ``scheduled_at = max(scheduled_at, now)`` in the same operation. Refusals: JobNotFoundError,
    JobAlreadyCompletedError, JobTakenByAnotherWorkerError, JobCancelledError (worker
    completions); JobFinishedError (a workerless completion of a failed or cancelled job).
    """

    job_id: str
    output: JsonValue = None
    worker_id: str | None = None
    lease_generation: int | None = None
    now: datetime | None = None
    running: Job | None = None
    """The job as its worker claimed it (``lease_generation`` equal to the item's), or None.

    Only a hint: every guard still applies. While the lease generation matches, no other
    operation has changed the row but for its lease expiry, so an adapter may build the
    completed job from this copy instead of reading the row back (a group commit's rows).
    """


@dataclass(frozen=True, slots=True, kw_only=True)
class JobCompleted:
    """The completed job, whether its chain completed, and the jobs it unblocked."""

    job: Job
    chain_completed: bool
    unblocked_jobs: list[Job] = field(default_factory=list)
    previous_leased_by: str | None = None
    was_running: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class JobsReapExpired:
    """Return up to ``limit`` running jobs whose lease expired to ``pending`` (lease cleared).

    Oldest lease first; rows locked elsewhere and ``exclude_job_ids`` are skipped. Each reaped
    job records the rescue: ``rescued_at = now``, ``rescued_from`` = the expired lease's
    holder, ``rescue_reason = "lease_expired"``, and ``last_attempt_error`` a readable line
    naming that worker (the abandoned attempt left no error of its own); the same line is
    appended to the error history as an :class:`AttemptError` of type ``AttemptAbandoned``
    (``attempt`` = the abandoned attempt, ``worker_id`` = its holder).
    """

    type_names: Sequence[str]
    exclude_job_ids: Sequence[str] = ()
    limit: int = 1
    now: datetime | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.limit, int) or isinstance(self.limit, bool) or self.limit < 1:
            raise InvalidArgumentError(f"reap limit must be a positive integer, got {self.limit!r}")
