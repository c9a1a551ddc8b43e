"""The state contract: every state transition and query, one frozen params object per operation.

Every operation is a single round trip wherever the engine allows it. Times are aware UTC
datetimes; ``now=None`` means the adapter's own clock. Suite: ``jobchain_conformance``.

Terminal statuses and what follows them (the lifecycle):

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
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Literal, Protocol, runtime_checkable

from jobchain.contracts.capabilities import Capability
from jobchain.contracts.scheduling import (
    JobWait,
    JobWaited,
    PausedTypesList,
    SchedulesList,
    SchedulesRegister,
    TypesPause,
)
from jobchain.entities import (
    PRIORITY_AGING,
    AttemptError,
    Chain,
    Deduplication,
    Job,
    JsonValue,
    Page,
    PausedType,
    Schedule,
    ScheduleRecord,
    TypeLimits,
    WorkerInfo,
    WorkerState,
    _use_slot_setting_init,
)
from jobchain.errors import (
    BlockerReference,
    InvalidArgumentError,
    InvalidPageSizeError,
    JobAlreadyCompletedError,
    JobCancelledError,
    JobchainError,
    JobNotFoundError,
    JobTakenByAnotherWorkerError,
)
from jobchain.stats import DURATION_SAMPLE, DURATION_WINDOW, STATS_WINDOWS, QueueStats

DEFAULT_PAGE_SIZE = 50
MAX_PAGE_SIZE = 500

Order = Literal["asc", "desc"]


def _check_page(limit: int, order: str) -> None:
    if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= MAX_PAGE_SIZE:
        raise InvalidPageSizeError(f"page limit must be an integer from 1 to {MAX_PAGE_SIZE}, got {limit!r}")
    if order not in ("asc", "desc"):
        raise InvalidArgumentError(f"order must be 'asc' or 'desc', got {order!r}")


def _check_timedelta(name: str, value: timedelta | None, *, positive: bool = False) -> None:
    if value is None:
        return
    if value < timedelta(0) or (positive and value == timedelta(0)):
        raise InvalidArgumentError(
            f"{name} must be {'positive' if positive else 'non-negative'}, got {value!r}"
        )


# ---------------------------------------------------------------- creation


@dataclass(frozen=True, slots=True, kw_only=True)
class NewJob:
    """A job to insert. ``chain_id=None`` starts a new chain whose id is this job's id.

    A continuation passes its chain's id and ``chain_index = previous + 1``; inserting an
    existing ``(chain_id, chain_index)`` returns the existing job with ``deduplicated=True``.
    ``blocker_chain_ids`` makes the job ``blocked`` while any of those chains is incomplete.
    """

    id: str
    type_name: str
    chain_type_name: str
    chain_id: str | None = None
    chain_index: int = 0
    input: JsonValue = None
    deduplication: Deduplication | None = None
    schedule: Schedule | None = None
    blocker_chain_ids: Sequence[str] = ()
    trace_context: JsonValue = None
    chain_trace_context: JsonValue = None
    runs_after_failed_blockers: bool = False
    """Stored on the job: see the module docstring's *Propagation*."""
    priority: int = 0
    """Stored on the job (validated by the client: ``validate_priority``)."""
    ordering_key: str | None = None
    """Roots only (continuations pass None). See *Ordered keys* in ``contracts.scheduling``."""


@dataclass(frozen=True, slots=True, kw_only=True)
class JobsCreate:
    """Insert jobs in one batch; equal (deduplication key, chain type) items collapse onto the first.

    Deduplication scope ``incomplete`` matches a chain whose last job is not terminal (not
    completed, failed or cancelled): a failed chain never holds its key.

    A blocker chain that is already failed or cancelled when the job is inserted: a
    ``runs_after_failed_blockers`` job counts it as resolved; any other job is inserted
    ``failed`` at once, exactly as propagation would have failed it (``failed_by_chain_id`` =
    the first such blocker in declared order). ``incomplete_blocker_chain_ids`` lists the
    blocker chains that are not terminal.
    """

    jobs: Sequence[NewJob]
    now: datetime | None = None
    announce_on: str | None = None
    """A channel from ``AnnouncesWithinState``. An adapter that supports it may announce each
    new pending job's type there within this transaction (and mark the job ``announced``);
    others ignore it."""


@dataclass(frozen=True, slots=True, kw_only=True)
class JobCreated:
    """Result per input job, in input order."""

    job: Job
    deduplicated: bool = False
    incomplete_blocker_chain_ids: tuple[str, ...] = ()
    ordered_after: str | None = None
    """For a new root with an ordering key: the key's previous chain (its implicit blocker,
    listed in ``incomplete_blocker_chain_ids`` too while it is not terminal), or None when the
    key had no chain."""
    announced: bool = False
    """The adapter announced this job on ``announce_on`` within the transaction: the caller
    publishes no job-scheduled notice for it."""


# Built once per job of every start: the cheaper constructor (same signature and errors).
_use_slot_setting_init(NewJob)
_use_slot_setting_init(JobCreated)


# ---------------------------------------------------------------- reads


@dataclass(frozen=True, slots=True, kw_only=True)
class ChainGet:
    """Read a chain; ``lock=True`` takes the exclusive lock on its last job until the tx ends."""

    chain_id: str
    lock: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class JobGet:
    """Read a job; ``lock=True`` takes the exclusive row lock until the tx ends.

    Claims, reaps and other ``lock=True`` reads wait for or skip that lock as for any row lock,
    but :class:`ChainsCancel` does not wait for it (an atomic attempt holds its job this way).
    """

    job_id: str
    lock: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class JobBlockersGet:
    """The blocker chains of a job, in the order they were declared."""

    job_id: str


@dataclass(frozen=True, slots=True, kw_only=True)
class JobNextAvailable:
    """Time until the earliest pending job of these types is eligible (zero if one is now).

    Paused types are left out. Type limits are not considered (see ``JobsAcquired.held_back``).
    """

    type_names: Sequence[str]
    now: datetime | None = None


# ---------------------------------------------------------------- worker transitions


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
class JobFail:
    """Fail a job for good: status ``failed``, ``failed_at = last_attempt_at = now``, lease
    cleared, ``last_attempt_error = error``, ``attempt_error`` (if given) appended to the
    history; ``scheduled_at`` and the attempt counters unchanged.

    Fencing as :class:`JobReschedule`. Failure propagates to the jobs blocked by the job's
    chain in the same operation (module docstring, *Propagation*).
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
    and the result lists them instead. Propagates like a failure (module docstring). A running
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
class ChainsPrune:
    """Retention: delete up to ``limit`` terminal chains that finished before the cutoff for
    their status, oldest first. ``None`` keeps that status forever.

    A chain qualifies when its last job is ``completed`` with ``completed_at <
    completed_before``, ``failed`` with ``failed_at < failed_before`` or ``cancelled`` with
    ``cancelled_at < cancelled_before``. Every job and blocker row of a deleted chain goes with
    it, as in :class:`ChainsDelete`; a qualifying chain that blocks a job outside the deleted
    set is skipped (kept until its dependents go). A qualifying chain that blocks a job of a
    chain that does not qualify is left out before the ``limit`` oldest are chosen, so it never
    crowds out the chains behind it. A reference through a ``resolves_on_any_end`` blocker
    (an ordering-key predecessor, a ``JobWait(runs_after_failed=True)``) never holds a
    qualifying chain back: that blocker is resolved by the chain being terminal, so the chain
    is deleted together with those blocker rows (the dependent keeps its other blockers) —
    otherwise a key that keeps getting chains would never lose its history. One caller at a
    time: a call that finds another prune in progress returns at once with ``busy=True`` and
    deletes nothing.
    ``locks_before`` also deletes up to ``limit`` deduplication bookkeeping rows (where the
    adapter keeps any) last used before it, and ordering-key rows whose last chain is gone.
    """

    completed_before: datetime | None = None
    failed_before: datetime | None = None
    cancelled_before: datetime | None = None
    locks_before: datetime | None = None
    limit: int = 500

    def __post_init__(self) -> None:
        if not isinstance(self.limit, int) or isinstance(self.limit, bool) or self.limit < 1:
            raise InvalidArgumentError(f"prune limit must be a positive integer, got {self.limit!r}")


@dataclass(frozen=True, slots=True, kw_only=True)
class PrunedChain:
    """A chain deleted by retention: its id, chain type and terminal status."""

    id: str
    type_name: str
    status: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ChainsPruned:
    """The deleted chains, and whether another prune held the lock (nothing was deleted)."""

    chains: list[PrunedChain] = field(default_factory=list)
    busy: bool = False
    locks_deleted: int = 0
    """Deduplication and ordering bookkeeping rows deleted (``locks_before``; at most ``limit``)."""


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


@dataclass(frozen=True, slots=True, kw_only=True)
class ChainsDelete:
    """Delete chains (every job and blocker row). Missing ids are skipped.

    All-or-nothing: if a job outside the set is blocked by a chain in the set, nothing is
    deleted and the result lists those ``blocker_references`` (with no chains); the client
    turns them into BlockerReferenceError. ``cascade=True`` first adds, recursively, every
    chain that blocks a job of the set (blockers declared by any of its jobs).
    """

    chain_ids: Sequence[str]
    cascade: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class ChainsDeleted:
    """The deleted chains (as they were) and the ids of deleted jobs that were running."""

    chains: list[Chain]
    running_job_ids: list[str] = field(default_factory=list)
    blocker_references: list[BlockerReference] = field(default_factory=list)


# ---------------------------------------------------------------- worker registry

WORKER_REPORTED_STATES = (WorkerState.RUNNING, WorkerState.DRAINING, WorkerState.STOPPED)


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerHeartbeat:
    """Record that a worker is alive, rescue the jobs of dead workers, in one round trip.

    Upserts the worker's registry row: every field as given, ``last_seen_at = now``,
    ``alive_until = now + alive_for``; ``started_at`` is set on the first heartbeat only.
    ``state="stopped"`` records a clean stop (the row then never counts as dead).

    With ``release_dead=True``, every other row in state ``running`` or ``draining`` whose
    ``alive_until`` passed becomes ``dead``, and the running jobs leased by those workers
    return to ``pending`` (lease cleared, ``rescued_at = now``, ``rescued_from`` = that
    worker, ``rescue_reason = "worker_dead"``, ``last_attempt_error`` a readable line, also
    appended to the error history as with a reap).
    Rows locked by another transaction are skipped (their lease expiry still rescues them).
    Late writes from the presumed-dead worker are fenced as after any lost lease.

    Rows whose ``alive_until`` is older than ``now - prune_after`` are deleted, except rows
    this call marks dead: they list as ``dead`` until a later heartbeat deletes them.
    """

    worker_id: str
    name: str
    host: str
    pid: int
    version: str
    type_names: Sequence[str]
    concurrency: int
    inflight: int
    state: WorkerState
    alive_for: timedelta
    release_dead: bool = False
    prune_after: timedelta = timedelta(hours=1)
    now: datetime | None = None

    def __post_init__(self) -> None:
        _check_timedelta("alive_for", self.alive_for, positive=True)
        _check_timedelta("prune_after", self.prune_after, positive=True)
        if self.state not in WORKER_REPORTED_STATES:
            raise InvalidArgumentError(
                f"a worker reports state running, draining or stopped, got {self.state!r}"
            )


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerHeartbeatResult:
    """What a heartbeat found.

    ``was_dead``: this worker's own row had been marked ``dead`` (another worker released its
    jobs; its attempts will find their leases lost). ``released_jobs``: the jobs this call
    returned to pending. ``next_lease_expiry``: time until the earliest lease among running
    jobs of ``type_names`` not leased by this worker expires (zero if one already has), or
    None if there is none — when a reap is next worth running.
    """

    was_dead: bool = False
    released_jobs: list[Job] = field(default_factory=list)
    dead_worker_ids: list[str] = field(default_factory=list)
    next_lease_expiry: timedelta | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkersList:
    """The worker registry, most recently started first; ``states`` filters (``dead`` included)."""

    states: Sequence[str] = ()
    now: datetime | None = None


# ---------------------------------------------------------------- queue health


@dataclass(frozen=True, slots=True, kw_only=True)
class QueueStatsGet:
    """Queue health per job type (see :class:`QueueStats`), in one round trip.

    ``type_names`` restricts the figures to those types (each listed even with no jobs);
    empty means every type that has jobs. ``windows``: the recent periods over which
    finished jobs are counted (each positive, at most a day). Attempt durations are sampled
    from the type's most recent completions within ``duration_window``, at most
    ``duration_sample`` of them (0: no durations). ``throughput_window`` (None: none) asks
    for completed/failed counts of every type in buckets of ``throughput_step`` ending at
    ``now``: ``ceil(window / step)`` buckets, oldest first, the last one holding ``now``,
    each starting at a multiple of ``step`` since the Unix epoch (at most 1,440 buckets).
    Served by indexes: no figure reads every row of a large terminal history except the
    per-status counts, which adapters keep cheap (index-only where the engine has it).
    """

    type_names: Sequence[str] = ()
    windows: Sequence[timedelta] = STATS_WINDOWS
    duration_window: timedelta = DURATION_WINDOW
    duration_sample: int = DURATION_SAMPLE
    throughput_window: timedelta | None = None
    throughput_step: timedelta = timedelta(minutes=1)
    now: datetime | None = None

    def __post_init__(self) -> None:
        for window in self.windows:
            if not timedelta(0) < window <= timedelta(days=1):
                raise InvalidArgumentError(
                    f"each stats window must be positive and at most a day, got {window!r}"
                )
        _check_timedelta("duration_window", self.duration_window, positive=True)
        if not isinstance(self.duration_sample, int) or not 0 <= self.duration_sample <= 100_000:
            raise InvalidArgumentError(
                f"duration_sample must be an integer from 0 to 100000, got {self.duration_sample!r}"
            )
        _check_timedelta("throughput_step", self.throughput_step, positive=True)
        if self.throughput_window is not None:
            _check_timedelta("throughput_window", self.throughput_window, positive=True)
            if self.throughput_window / self.throughput_step > 1_440:
                raise InvalidArgumentError(
                    "throughput_window / throughput_step must be at most 1440 buckets; "
                    "use a longer throughput_step"
                )


# ---------------------------------------------------------------- listings


@dataclass(frozen=True, slots=True, kw_only=True)
class ChainsList:
    """List chains by root ``created_at`` (then id). ``statuses`` match the last job;
    ``root_only`` excludes chains used as a blocker; bounds are inclusive."""

    type_names: Sequence[str] = ()
    chain_ids: Sequence[str] = ()
    job_ids: Sequence[str] = ()
    statuses: Sequence[str] = ()
    root_only: bool = False
    created_from: datetime | None = None
    created_to: datetime | None = None
    order: Order = "desc"
    cursor: str | None = None
    limit: int = DEFAULT_PAGE_SIZE

    def __post_init__(self) -> None:
        _check_page(self.limit, self.order)


@dataclass(frozen=True, slots=True, kw_only=True)
class JobsList:
    """List jobs by ``created_at`` (then id); bounds are inclusive.

    ``error_types`` matches the type of the last entry of a job's error history (dead letters
    by error: ``statuses=["failed"], error_types=["TimeoutError"]``). ``leased_by`` matches
    running jobs leased by those worker ids (what a worker holds).
    """

    type_names: Sequence[str] = ()
    chain_type_names: Sequence[str] = ()
    chain_ids: Sequence[str] = ()
    job_ids: Sequence[str] = ()
    statuses: Sequence[str] = ()
    error_types: Sequence[str] = ()
    leased_by: Sequence[str] = ()
    created_from: datetime | None = None
    created_to: datetime | None = None
    order: Order = "desc"
    cursor: str | None = None
    limit: int = DEFAULT_PAGE_SIZE

    def __post_init__(self) -> None:
        _check_page(self.limit, self.order)


@dataclass(frozen=True, slots=True, kw_only=True)
class ChainJobsList:
    """List the jobs of one chain by ``chain_index``."""

    chain_id: str
    order: Order = "asc"
    cursor: str | None = None
    limit: int = DEFAULT_PAGE_SIZE

    def __post_init__(self) -> None:
        _check_page(self.limit, self.order)


@dataclass(frozen=True, slots=True, kw_only=True)
class BlockedJobsList:
    """List jobs that declared ``blocker_chain_id`` as a blocker, by ``created_at`` (then id)."""

    blocker_chain_id: str
    order: Order = "desc"
    cursor: str | None = None
    limit: int = DEFAULT_PAGE_SIZE

    def __post_init__(self) -> None:
        _check_page(self.limit, self.order)


# ---------------------------------------------------------------- protocols


@runtime_checkable
class StateTx(Protocol):
    """One open transaction (or savepoint) of a state adapter."""

    def savepoint(self) -> AbstractAsyncContextManager[StateTx]:
        """Nested unit of work: released on success, rolled back (and re-raised) on error.

        Guarantees (suite: SavepointTests): rollback leaves the outer tx usable, even a
        poisoned one.
        """
        ...

    async def jobs_create(self, params: JobsCreate) -> list[JobCreated]: ...
    async def chain_get(self, params: ChainGet) -> Chain | None: ...
    async def job_get(self, params: JobGet) -> Job | None: ...
    async def job_blockers_get(self, params: JobBlockersGet) -> list[Chain]: ...
    async def job_next_available(self, params: JobNextAvailable) -> timedelta | None: ...
    async def jobs_acquire(self, params: JobsAcquire) -> JobsAcquired: ...
    async def job_renew_lease(self, params: JobRenewLease) -> Job: ...
    async def job_reschedule(self, params: JobReschedule) -> Job: ...
    async def job_complete(self, params: JobComplete) -> JobCompleted: ...
    async def job_fail(self, params: JobFail) -> JobFailed: ...
    async def chains_cancel(self, params: ChainsCancel) -> ChainsCancelled: ...
    async def jobs_retry(self, params: JobsRetry) -> JobsRetried: ...
    async def chains_prune(self, params: ChainsPrune) -> ChainsPruned: ...
    async def jobs_reap_expired(self, params: JobsReapExpired) -> list[Job]: ...
    async def worker_heartbeat(self, params: WorkerHeartbeat) -> WorkerHeartbeatResult: ...
    async def workers_list(self, params: WorkersList) -> list[WorkerInfo]: ...
    async def queue_stats(self, params: QueueStatsGet) -> QueueStats: ...
    async def jobs_trigger(self, params: JobsTrigger) -> JobsTriggered: ...
    async def chains_delete(self, params: ChainsDelete) -> ChainsDeleted: ...
    async def chains_list(self, params: ChainsList) -> Page[Chain]: ...
    async def jobs_list(self, params: JobsList) -> Page[Job]: ...
    async def chain_jobs_list(self, params: ChainJobsList) -> Page[Job]: ...
    async def blocked_jobs_list(self, params: BlockedJobsList) -> Page[Job]: ...
    # scheduling controls (contracts.scheduling)
    async def job_wait(self, params: JobWait) -> JobWaited: ...
    async def types_pause(self, params: TypesPause) -> list[PausedType]: ...
    async def paused_types_list(self, params: PausedTypesList) -> list[PausedType]: ...
    async def schedules_register(self, params: SchedulesRegister) -> list[ScheduleRecord]: ...
    async def schedules_list(self, params: SchedulesList) -> list[ScheduleRecord]: ...


@runtime_checkable
class StateAdapter(Protocol):
    """A state backend: transactions over the job tables plus lifecycle.

    ``transaction(read_only=True)`` reads committed data and never waits for writers.
    ``migrate()`` is idempotent and safe to run from several processes at once.
    """

    capabilities: frozenset[Capability]
    time_precision: timedelta

    def transaction(
        self, *, read_only: bool = False, connection: object | None = None
    ) -> AbstractAsyncContextManager[StateTx]:
        """Open a transaction, or join the caller's own driver ``connection``.

        With ``connection`` (a provider-specific object such as a psycopg connection or an
        SQLAlchemy AsyncConnection/AsyncSession already inside a transaction) the adapter
        runs its statements there and neither commits nor rolls back: the caller's commit
        decides. Adapters that cannot join foreign connections raise InvalidArgumentError.
        """
        ...

    async def migrate(self) -> None: ...
    async def close(self) -> None: ...


@runtime_checkable
class ObservesCallerCommits(Protocol):
    """Optional: an adapter that can tell when a joined caller transaction commits."""

    def after_commit(
        self, connection: object, on_commit: Callable[[], Awaitable[None]], on_rollback: Callable[[], None]
    ) -> bool:
        """Arrange ``on_commit`` after ``connection``'s transaction commits (``on_rollback`` if
        it rolls back). Return False if this connection offers no way to observe that."""
        ...


@runtime_checkable
class RunsOperationsAlone(Protocol):
    """Optional: an adapter that can run an operation as its own transaction."""

    def autocommit(self, *, read_only: bool = False) -> AbstractAsyncContextManager[StateTx]:
        """A StateTx whose every operation commits on its own as it returns.

        For a unit of work that is a single operation (a claim, a look-up, a group of
        completions, a plain start): no BEGIN and no COMMIT round trips. What an operation
        wrote is durable when it returns. An operation the adapter runs as several
        statements may commit each one only where each step stands alone (a claim retried
        after losing candidates keeps what it claimed first); steps that must hold their
        locks together share one transaction (a pipeline or a transaction block).
        Savepoints raise InvalidArgumentError.
        An adapter that cannot run a given connection that way opens an ordinary transaction.
        """
        ...


@runtime_checkable
class ReservesConnections(Protocol):
    """Optional: an adapter whose transactions draw on a bounded set of connections (a pool)."""

    async def reserve_connections(self, count: int) -> int | None:
        """Make room for ``count`` transactions open at once; return how many can be.

        An adapter with a pool of its own grows it to at least ``count``; over a caller's
        pool, connection or engine it changes nothing (the caller sized it). Returns the
        number of connections available afterwards, or None when no pool bounds them.
        """
        ...


COMPLETION_REFUSALS = (
    JobNotFoundError,
    JobAlreadyCompletedError,
    JobTakenByAnotherWorkerError,
    JobCancelledError,
)
"""The errors with which a state adapter refuses a completion without writing anything."""


@runtime_checkable
class CompletesJobsInBatches(Protocol):
    """Optional: a state transaction that completes many jobs in one round trip."""

    async def jobs_complete(self, params: Sequence[JobComplete]) -> list[JobCompleted | JobchainError]:
        """Complete each job exactly as ``job_complete`` would, in order, in this transaction.

        A refusal (JobNotFoundError, JobAlreadyCompletedError, JobTakenByAnotherWorkerError,
        JobCancelledError) changes nothing and is returned in that job's place; any other error
        fails the call.
        """
        ...
