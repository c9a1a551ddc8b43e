"""Queue health figures: what ``client.queue_stats()`` returns, and how percentiles are taken.

Every figure is read in one round trip at one instant (``QueueStats.now``), per job type.
Adapters fill these from their own queries; :func:`duration_percentiles` is the one place
that turns a sample of attempt durations into the reported percentiles, so every backend
that samples in Python reports them the same way.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from jobchain.entities import JobStatus
from jobchain.error_groups import ErrorGroup
from jobchain.errors import InvalidArgumentError

STATS_WINDOWS = (timedelta(minutes=1), timedelta(minutes=5), timedelta(minutes=15))
"""The recent periods over which finished jobs are counted by default."""
DURATION_WINDOW = timedelta(minutes=15)
"""How far back completed attempts are sampled for the duration percentiles by default."""
DURATION_SAMPLE = 1_000
"""At most this many of a type's most recent completed attempts make its percentiles."""
ERROR_TYPES_KEPT = 10
"""A type's failed jobs are broken down by at most this many error types (the most frequent)."""
ERROR_SAMPLE_MAX = 10_000
"""``queue_stats(error_sample=...)`` groups the errors of at most this many failed jobs."""


@dataclass(frozen=True, slots=True, kw_only=True)
class WindowCounts:
    """Jobs of one type that finished within ``window`` before ``now``."""

    window: timedelta
    completed: int
    failed: int
    cancelled: int


@dataclass(frozen=True, slots=True, kw_only=True)
class AttemptDurations:
    """How long completed attempts ran (claim to completion), over a recent sample.

    ``count`` is the sample size: the type's most recent completions within the duration
    window, at most ``sample`` of them. Percentiles use the nearest-rank method.
    """

    count: int
    p50: timedelta
    p95: timedelta
    p99: timedelta
    max: timedelta


@dataclass(frozen=True, slots=True, kw_only=True)
class ThroughputBucket:
    """Jobs of every type that finished in ``[start, start + step)``."""

    start: datetime
    completed: int
    failed: int


@dataclass(frozen=True, slots=True, kw_only=True)
class TypeStats:
    """Queue health of one job type at ``QueueStats.now``.

    ``pending`` = ``due`` (pending, ``scheduled_at <= now``: waiting for a worker) +
    ``scheduled`` (pending, to run later). ``expired_leases``: running jobs whose lease has
    passed (their worker is gone or stalled; the reaper will return them). ``oldest_due_at``:
    the ``scheduled_at`` of the longest-waiting due job. ``failed_by_error_type``: failed
    jobs by the type of their last recorded error (``""`` for none), the
    :data:`ERROR_TYPES_KEPT` most frequent.
    """

    type_name: str
    blocked: int = 0
    pending: int = 0
    due: int = 0
    scheduled: int = 0
    running: int = 0
    expired_leases: int = 0
    completed: int = 0
    failed: int = 0
    cancelled: int = 0
    oldest_due_at: datetime | None = None
    failed_by_error_type: Mapping[str, int] = field(default_factory=dict)
    recent: tuple[WindowCounts, ...] = ()
    durations: AttemptDurations | None = None
    paused: bool = False
    """The type is paused (``client.pause``): no worker claims it. A paused type is listed
    even when it has no jobs."""

    def count(self, status: JobStatus | str) -> int:
        """The number of jobs of this type in ``status`` (a :class:`JobStatus` value)."""
        try:
            name = JobStatus(status).value
        except ValueError:
            raise InvalidArgumentError(
                f"status must be one of {', '.join(s.value for s in JobStatus)}, got {status!r}"
            ) from None
        return int(getattr(self, name))

    @property
    def total(self) -> int:
        """Every job of this type, whatever its status."""
        return sum(self.count(status) for status in JobStatus)


@dataclass(frozen=True, slots=True, kw_only=True)
class QueueStats:
    """Queue health per job type, read at ``now`` (the state backend's clock).

    ``types`` holds every type that has at least one job or is paused (with ``type_names``:
    exactly the types asked for, zeros where they have no jobs), sorted by name.
    ``throughput`` is empty unless asked for.

    ``error_groups`` (asked for with ``error_sample``) group the last errors of the newest
    ``errors_read`` failed jobs by fingerprint, most jobs first; ``errors_read`` below
    ``total("failed")`` means older failures were left out. ``notify_degraded``: the notify
    backend's delivery self-check last found that notifications do not arrive (workers and
    ``await_chain`` poll meanwhile), with ``notify_reason``; False without a self-check.
    """

    now: datetime
    types: tuple[TypeStats, ...] = ()
    throughput: tuple[ThroughputBucket, ...] = ()
    error_groups: tuple[ErrorGroup, ...] = ()
    errors_read: int = 0
    notify_degraded: bool = False
    notify_reason: str | None = None

    def get(self, type_name: str) -> TypeStats:
        """The figures of one type; for a type not in ``types``, zeros and no ``recent`` windows."""
        for stats in self.types:
            if stats.type_name == type_name:
                return stats
        return TypeStats(type_name=type_name)

    def total(self, status: JobStatus | str) -> int:
        """Jobs in ``status`` across every type."""
        return sum(stats.count(status) for stats in self.types)

    @property
    def due(self) -> int:
        """Jobs waiting for a worker now, across every type."""
        return sum(stats.due for stats in self.types)

    @property
    def oldest_due_age(self) -> timedelta | None:
        """How long the longest-waiting due job has waited (None when nothing is due)."""
        oldest = [stats.oldest_due_at for stats in self.types if stats.oldest_due_at is not None]
        return max(timedelta(0), self.now - min(oldest)) if oldest else None


def duration_percentiles(durations: Iterable[timedelta]) -> AttemptDurations | None:
    """Nearest-rank p50/p95/p99/max of a sample; None for an empty one."""
    ordered = sorted(durations)
    if not ordered:
        return None

    def rank(percent: int) -> timedelta:
        return ordered[max(0, math.ceil(percent / 100 * len(ordered)) - 1)]

    return AttemptDurations(count=len(ordered), p50=rank(50), p95=rank(95), p99=rank(99), max=ordered[-1])
