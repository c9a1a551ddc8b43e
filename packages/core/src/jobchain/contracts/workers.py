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
MAX_INCARNATION = 2**63 - 1
"""The highest ``WorkerHeartbeat.incarnation``: every backend stores it as a signed 64-bit int."""


def _check_incarnation(value: object) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= MAX_INCARNATION:
        raise InvalidArgumentError(
            f"incarnation must be an integer from 0 to {MAX_INCARNATION}, got {value!r}"
        )


def _check_count(name: str, value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < 2**31:
        raise InvalidArgumentError(f"{name} must be a non-negative integer, got {value!r}")
    return value


def _check_load(inflight: object, buffered: object, committing: object, capacity: object) -> None:
    held = _check_count("inflight", inflight)
    waiting = _check_count("buffered", buffered)
    _check_count("committing", committing)
    _check_count("capacity", capacity)
    if waiting > held:
        raise InvalidArgumentError(
            f"buffered ({waiting}) counts jobs among inflight ({held}): it cannot be larger"
        )


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

    ``incarnation`` fences heartbeats (suite: WorkerIncarnationTests). A worker numbers its
    lives: it sends the same incarnation on every heartbeat and, once told it was presumed
    dead, rejoins under a higher one. Against the stored row:

    - no row yet: it is inserted with this incarnation;
    - ``incarnation`` lower than the row's (a late heartbeat of an earlier life), or the row
      is ``dead`` and ``incarnation`` is not higher than the row's: the heartbeat is *fenced*.
      It writes nothing: the row keeps every field (a dead row stays ``dead``, its
      ``alive_until`` unchanged), no other worker is marked dead, released or pruned; the
      result says ``was_dead=True`` with no released jobs (``next_lease_expiry`` is computed);
    - ``incarnation`` higher than the row's: a rejoin, the row is written as reported with the
      new incarnation (``started_at`` may stay), ``was_dead=False``;
    - otherwise (same incarnation, row not ``dead``): the upsert above, ``was_dead=False``.

    So a heartbeat a worker abandoned during a partition, arriving after another worker
    marked it dead, cannot bring the row back: the worker learns it was presumed dead.
    ``incarnation`` is an int from 0 to 2**63 - 1 (bool refused).

    The load (stored as given, listed by ``workers_list``; see
    :class:`~jobchain.entities.WorkerInfo`): ``inflight`` jobs running or buffered,
    ``buffered`` of them waiting in the prefetch buffer, ``committing`` attempts whose commit
    is being written, ``capacity`` the most jobs the worker runs or buffers at once (0: not
    reported). Each is a count from 0 to 2**31 - 1; ``buffered`` is at most ``inflight``.
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
    incarnation: int = 0
    buffered: int = 0
    committing: int = 0
    capacity: int = 0
    now: datetime | None = None

    def __post_init__(self) -> None:
        _check_timedelta("alive_for", self.alive_for, positive=True)
        _check_incarnation(self.incarnation)
        _check_load(self.inflight, self.buffered, self.committing, self.capacity)
        _check_timedelta("prune_after", self.prune_after, positive=True)
        if self.state not in WORKER_REPORTED_STATES:
            raise InvalidArgumentError(
                f"a worker reports state running, draining or stopped, got {self.state!r}"
            )


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerHeartbeatResult:
    """What a heartbeat found.

    ``was_dead``: the heartbeat was fenced (see :class:`WorkerHeartbeat`): this incarnation's
    row had been marked ``dead`` (another worker released its jobs; its attempts will find their
    leases lost), or a later incarnation holds the row. Nothing was written; the worker should
    abort its attempts and rejoin under a higher incarnation. ``released_jobs``: the jobs this call
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
