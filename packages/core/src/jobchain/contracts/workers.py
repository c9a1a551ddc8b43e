"""The worker registry: ``worker_heartbeat`` (with the rescue of dead workers' jobs) and
``workers_list``.

Part of the state contract (:class:`jobchain.contracts.StateTx`); every name is also importable
from ``jobchain.contracts`` and ``jobchain.contracts.state``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from jobchain.contracts._validation import _check_timedelta
from jobchain.entities import Job, WorkerState
from jobchain.errors import InvalidArgumentError

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
