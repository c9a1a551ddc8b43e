"""The scheduling controls of the state contract: ordered keys, limits, pause, waits, schedules.

Every control is enforced by the state backend, inside the operation, across every worker.
Suite: ``jobchain_conformance`` (``SchedulingStateTests``).

* **Priorities.** ``Job.priority`` orders claims (``JobsAcquire``: aged jobs first, then
  priority descending, FIFO within a priority).
* **Ordered keys.** A new root created with ``NewJob.ordering_key`` gets the key's previous
  chain (the one created last with that key, whatever its status) as an implicit blocker
  chain, appended after its declared blockers. That blocker is resolved by *any* terminal
  status of the previous chain: its failure or cancellation never fails the new chain. So
  the chains of a key run one at a time, in creation order; chains of other keys are not
  held. Creation order is the order in which the creating transactions took the key: a
  creation waits for an uncommitted creation of the same key (the adapter serializes per
  key, e.g. an upserted row per key), never for other keys. A deduplicated start takes no
  place in the order. Continuations do not carry the key.
* **Limits** (``JobsAcquire.type_limits``, from the claiming worker's registry).
  ``max_running``: a claim never brings the number of ``running`` jobs of the type (expired
  leases included, until reaped) above it, even with many claimers at once (the adapter
  serializes the claims of limited types; unlimited types claim as before).
  ``rate_limit``: at most ``limit`` claims of the type start in each fixed window
  (``RateLimit.window_start``); the count is kept by the backend, per type.
* **Pause.** A paused type is not claimed by any claim that starts after the pause
  committed; running jobs are untouched; ``queue_stats`` shows ``paused``.
* **Dynamic blockers.** :class:`JobWait`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from jobchain.entities import Job
from jobchain.errors import InvalidArgumentError


@dataclass(frozen=True, slots=True, kw_only=True)
class JobWait:
    """A running job waits for chains (dynamic blockers); its attempt ends without failing.

    Fencing as ``JobReschedule`` with ``worker_id`` (JobNotFoundError,
    JobTakenByAnotherWorkerError, JobCancelledError, JobAlreadyCompletedError; nothing
    changes). ``blocker_chain_ids`` are appended to the job's blocker chains (one already
    declared is not added twice); each must be an existing chain other than the job's own
    (ChainNotFoundError / InvalidArgumentError, nothing changes). The lease is cleared,
    ``last_attempt_at = now`` and ``attempt_base + 1`` (the attempt uses none of the budget, as
    a released one). The job becomes ``blocked`` while any of its blocker chains is not
    terminal, else ``pending`` at ``now``; completion and propagation unblock it as for any
    blocked job, and its next attempt reads every blocker's output.

    ``runs_after_failed``: the new blockers are resolved by any terminal status (the handler
    reads their statuses). Otherwise a new blocker chain that fails or is cancelled fails the
    job as propagation does — at once if one already is (the result's ``failed_jobs`` then
    holds what that failure propagated to).
    """

    job_id: str
    worker_id: str
    blocker_chain_ids: Sequence[str]
    lease_generation: int | None = None
    runs_after_failed: bool = False
    now: datetime | None = None

    def __post_init__(self) -> None:
        if isinstance(self.blocker_chain_ids, str) or not self.blocker_chain_ids:
            raise InvalidArgumentError("a job waits for a non-empty list of chain ids")


@dataclass(frozen=True, slots=True, kw_only=True)
class JobWaited:
    """The job after the wait (blocked, pending or failed) and its open blocker chains."""

    job: Job
    incomplete_blocker_chain_ids: tuple[str, ...] = ()
    failed_jobs: list[Job] = field(default_factory=list)
    unblocked_jobs: list[Job] = field(default_factory=list)


@dataclass(frozen=True, slots=True, kw_only=True)
class TypesPause:
    """Pause (``paused=True``) or resume job types; idempotent. Returns the paused types among
    ``type_names`` afterwards. Pausing an already paused type keeps its ``paused_at``. Types
    need no jobs and need not be known to the backend."""

    type_names: Sequence[str]
    paused: bool = True
    now: datetime | None = None

    def __post_init__(self) -> None:
        if isinstance(self.type_names, str):
            raise InvalidArgumentError("type_names must be a list of job type names, not a string")


@dataclass(frozen=True, slots=True, kw_only=True)
class PausedTypesList:
    """Every paused type, by name."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ScheduleRegistration:
    """One schedule a worker runs, as it registers it (see ``ScheduleRecord``)."""

    name: str
    cron: str
    timezone: str
    type_name: str
    catch_up: bool
    worker_name: str
    next_tick_at: datetime | None = None
    last_tick_at: datetime | None = None
    last_chain_id: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class SchedulesRegister:
    """Upsert schedules by name in one round trip.

    Each row gets every field given, ``last_seen_at = now``; ``registered_at`` is set when the
    row is created. ``last_tick_at`` only moves forward (a registration with an older or no
    tick keeps the stored tick and its ``last_chain_id``). ``forget_before``: rows last seen
    before it are deleted (schedules removed from every worker's code).
    """

    schedules: Sequence[ScheduleRegistration]
    forget_before: datetime | None = None
    now: datetime | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class SchedulesList:
    """Every registered schedule, by name."""
