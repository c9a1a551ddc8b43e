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

from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

from jobchain.entities import AttemptError, Job, Schedule

if TYPE_CHECKING:
    from jobchain.contracts.state import StateTx


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

    ``cascade=True`` first extends the set with the chains it waits for. A *blocker* of a chain
    is a chain that blocks one of its jobs (declared at creation or added by a handler's
    :class:`JobWait`), of any status; only the non-terminal ones count (a completed, failed or
    cancelled blocker is skipped silently, and its own blockers are not walked). A blocker is
    *shared* when it blocks a job of a non-terminal chain that is not in the set (others wait
    for it too). The set is the largest one that holds the named chains and in which every
    other chain is reached from a named chain through blockers of the set and is not shared;
    equivalently: take every non-terminal chain reachable through blockers, then drop, until
    nothing changes, each chain that is shared and each chain no longer reached. So a shared
    chain is left out together with what only it reaches, and a blocker of both a chain of the
    set and a shared chain is left out too (cancelling it would fail the shared chain). The
    result's ``shared`` lists the non-terminal blockers of jobs of the set that were left out
    (what only they reach is not listed). ``include_shared=True`` takes every non-terminal
    chain reachable through blockers. The refusals above concern the named chains only.
    :func:`cancel_cascade` computes the set from the blocker edges.

    ``dry_run=True``: the same result as the call would return (the jobs as they would be),
    and nothing changes (:func:`cancel_dry_run` runs the call in a savepoint rolled back).
    """

    chain_ids: Sequence[str]
    reason: str | None = None
    now: datetime | None = None
    cascade: bool = False
    include_shared: bool = False
    dry_run: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class ChainsCancelled:
    """The cancelled jobs (each chain's last job, as it is now), which of them were running
    (their workers must be told: publish ownership lost), and the propagation.

    ``cancelled`` holds the named chains' last jobs (request order); ``cascaded`` the last jobs
    of the chains the cascade added and ``shared`` the ids of the blocker chains it left out
    because others wait for them, each by root creation (``created_at``, id).
    ``running_job_ids`` and ``previous_leased_by`` cover both ``cancelled`` and ``cascaded``.
    """

    cancelled: list[Job] = field(default_factory=list)
    running_job_ids: list[str] = field(default_factory=list)
    previous_leased_by: dict[str, str] = field(default_factory=dict)
    failed_jobs: list[Job] = field(default_factory=list)
    unblocked_jobs: list[Job] = field(default_factory=list)
    not_found: list[str] = field(default_factory=list)
    not_cancellable: list[tuple[str, str]] = field(default_factory=list)
    """(chain id, its status) for each chain that is already completed, failed or cancelled."""
    cascaded: list[Job] = field(default_factory=list)
    shared: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class CancelCascade:
    """What a cascading cancel adds to the named chains and what it leaves out because shared;
    each list ordered as the ``order`` given to :func:`cancel_cascade`."""

    added: list[str]
    shared: list[str]


def cancel_cascade(
    named: Sequence[str],
    edges: Iterable[tuple[str, str]],
    order: Mapping[str, Any],
    *,
    include_shared: bool = False,
) -> CancelCascade:
    """The cascade of :class:`ChainsCancel` from its blocker edges.

    ``edges``: (dependent chain id, blocker chain id) for every job of a non-terminal chain
    blocked by a non-terminal chain reachable from ``named`` through such edges — dependents
    outside that closure included, which is how a blocker is known to be shared. ``order``:
    a sort key per blocker chain (its root's ``(created_at, id)``).
    """
    blockers_of: dict[str, list[str]] = {}
    dependents_of: dict[str, set[str]] = {}
    for dependent, blocker in edges:
        if dependent != blocker:
            blockers_of.setdefault(dependent, []).append(blocker)
            dependents_of.setdefault(blocker, set()).add(dependent)
    start = set(named)

    def walk(within: set[str] | None) -> set[str]:
        """Reach from the named chains; with ``within``, only through chains that are not
        shared with a chain outside it."""
        seen = set(start)
        queue = deque(start)
        while queue:
            for blocker in blockers_of.get(queue.popleft(), ()):
                if blocker not in seen and (within is None or dependents_of.get(blocker, set()) <= within):
                    seen.add(blocker)
                    queue.append(blocker)
        return seen

    taken = walk(None)
    if not include_shared:
        while (narrower := walk(taken)) != taken:  # shrinks each round: a fixed point soon
            taken = narrower
    shared = {b for c in taken for b in blockers_of.get(c, ()) if b not in taken}
    return CancelCascade(
        added=sorted(taken - start, key=lambda chain_id: order[chain_id]),
        shared=sorted(shared, key=lambda chain_id: order[chain_id]),
    )


class _UndoneError(Exception):
    def __init__(self, result: ChainsCancelled) -> None:
        self.result = result


async def cancel_dry_run(tx: StateTx, params: ChainsCancel) -> ChainsCancelled:
    """Run ``params`` (without ``dry_run``) in a savepoint of ``tx`` that is rolled back, and
    return what it returned: a dry run for adapters with savepoints."""
    try:
        async with tx.savepoint() as inner:
            raise _UndoneError(await inner.chains_cancel(replace(params, dry_run=False)))
    except _UndoneError as undone:
        return undone.result


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
