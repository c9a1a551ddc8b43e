"""``queue_stats`` of the in-process adapter: every figure from one walk over the visible jobs.

The reference for the other backends, so every choice the contract leaves open is made here
and pinned by the conformance suite (``state_queue_stats``):

- a due job has ``scheduled_at <= now``; an expired lease has ``leased_until < now`` (as the
  reaper decides);
- a window or the duration window holds what finished at ``now - window`` or later;
- failures by error type keep the most frequent types, ties broken by the error type in code
  point order, and list them in that order;
- the duration sample takes the most recent completions of claimed attempts (a completion
  without ``attempt_started_at`` has no duration), ties on ``completed_at`` broken by the
  greater id first;
- throughput counts every type, whatever ``type_names`` says;
- a paused type is listed even with no jobs (unless ``type_names`` leaves it out).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from itertools import islice

from jobchain.contracts.state import QueueStatsGet
from jobchain.entities import Job, JobStatus
from jobchain.memory._views import View
from jobchain.stats import (
    ERROR_TYPES_KEPT,
    QueueStats,
    ThroughputBucket,
    TypeStats,
    WindowCounts,
    duration_percentiles,
)

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(slots=True)
class _Tally:
    """The running figures of one type while the walk goes on."""

    counts: Counter[JobStatus] = field(default_factory=Counter)
    due: int = 0
    oldest_due_at: datetime | None = None
    expired_leases: int = 0
    error_types: Counter[str] = field(default_factory=Counter)
    finished: list[tuple[JobStatus, datetime]] = field(default_factory=list)
    completions: list[tuple[datetime, str, timedelta]] = field(default_factory=list)

    def add(self, job: Job, now: datetime, duration_from: datetime) -> None:
        self.counts[job.status] += 1
        if job.status is JobStatus.PENDING and job.scheduled_at <= now:
            self.due += 1
            if self.oldest_due_at is None or job.scheduled_at < self.oldest_due_at:
                self.oldest_due_at = job.scheduled_at
        elif job.status is JobStatus.RUNNING:
            if job.leased_until is not None and job.leased_until < now:
                self.expired_leases += 1
        elif job.status is JobStatus.FAILED:
            self.error_types[last_error_type(job)] += 1
        finished_at = _finished_at(job)
        if finished_at is not None:
            self.finished.append((job.status, finished_at))
        if (
            job.status is JobStatus.COMPLETED
            and job.completed_at is not None
            and job.attempt_started_at is not None
            and job.completed_at >= duration_from
        ):
            self.completions.append((job.completed_at, job.id, job.completed_at - job.attempt_started_at))

    def stats(self, type_name: str, now: datetime, params: QueueStatsGet, *, paused: bool) -> TypeStats:
        pending = self.counts[JobStatus.PENDING]
        self.completions.sort(reverse=True)  # most recent first; equal times: greater id first
        sample = islice(self.completions, params.duration_sample)
        return TypeStats(
            type_name=type_name,
            blocked=self.counts[JobStatus.BLOCKED],
            pending=pending,
            due=self.due,
            scheduled=pending - self.due,
            running=self.counts[JobStatus.RUNNING],
            expired_leases=self.expired_leases,
            completed=self.counts[JobStatus.COMPLETED],
            failed=self.counts[JobStatus.FAILED],
            cancelled=self.counts[JobStatus.CANCELLED],
            oldest_due_at=self.oldest_due_at,
            failed_by_error_type=top_error_types(self.error_types),
            recent=tuple(self._window(window, now) for window in params.windows),
            durations=duration_percentiles(duration for _, _, duration in sample),
            paused=paused,
        )

    def _window(self, window: timedelta, now: datetime) -> WindowCounts:
        since = now - window
        counts = Counter(status for status, at in self.finished if at >= since)
        return WindowCounts(
            window=window,
            completed=counts[JobStatus.COMPLETED],
            failed=counts[JobStatus.FAILED],
            cancelled=counts[JobStatus.CANCELLED],
        )


def last_error_type(job: Job) -> str:
    """The type of the job's last recorded error (``""`` for an empty history)."""
    return job.attempt_errors[-1].error_type if job.attempt_errors else ""


def top_error_types(counts: Counter[str]) -> dict[str, int]:
    """The most frequent error types, most frequent first, ties by error type (code points)."""
    ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    return dict(ranked[:ERROR_TYPES_KEPT])


def _finished_at(job: Job) -> datetime | None:
    """When a job reached its current terminal status (None unless it is terminal)."""
    if job.status is JobStatus.COMPLETED:
        return job.completed_at
    if job.status is JobStatus.FAILED:
        return job.failed_at
    if job.status is JobStatus.CANCELLED:
        return job.cancelled_at
    return None


def bucket_starts(now: datetime, window: timedelta, step: timedelta) -> list[datetime]:
    """``ceil(window / step)`` bucket starts at multiples of ``step`` since the epoch, the last
    one holding ``now``, oldest first (integer microseconds: no float rounding)."""
    step_us = step // timedelta(microseconds=1)
    window_us = window // timedelta(microseconds=1)
    count = -(-window_us // step_us)
    last = EPOCH + step * ((now - EPOCH) // timedelta(microseconds=1) // step_us)
    return [last - step * (count - 1 - index) for index in range(count)]


def _throughput(jobs: list[Job], params: QueueStatsGet, now: datetime) -> tuple[ThroughputBucket, ...]:
    if params.throughput_window is None:
        return ()
    starts = bucket_starts(now, params.throughput_window, params.throughput_step)
    first, step = starts[0], params.throughput_step
    completed = [0] * len(starts)
    failed = [0] * len(starts)
    for job in jobs:
        at = job.completed_at if job.status is JobStatus.COMPLETED else None
        if job.status is JobStatus.FAILED:
            at = job.failed_at
        if at is None or at < first:
            continue
        index = (at - first) // step
        if index < len(starts):
            (completed if job.status is JobStatus.COMPLETED else failed)[index] += 1
    return tuple(
        ThroughputBucket(start=start, completed=completed[index], failed=failed[index])
        for index, start in enumerate(starts)
    )


def queue_stats(
    view: View, params: QueueStatsGet, now: datetime, paused: Collection[str] = frozenset()
) -> QueueStats:
    """Every figure of :class:`QueueStats` at ``now`` over what ``view`` sees; ``paused``: the
    paused type names."""
    wanted = set(params.type_names)
    duration_from = now - params.duration_window
    tallies: dict[str, _Tally] = {name: _Tally() for name in (wanted or paused)}
    finished: list[Job] = []  # for throughput, which counts every type
    counting_throughput = params.throughput_window is not None
    for job in view.walk(roots=False, descending=False, after=None):
        if counting_throughput and job.status in (JobStatus.COMPLETED, JobStatus.FAILED):
            finished.append(job)
        if wanted and job.type_name not in wanted:
            continue
        tally = tallies.get(job.type_name)
        if tally is None:
            tally = tallies[job.type_name] = _Tally()
        tally.add(job, now, duration_from)
    return QueueStats(
        now=now,
        types=tuple(
            tallies[name].stats(name, now, params, paused=name in paused) for name in sorted(tallies)
        ),
        throughput=_throughput(finished, params, now),
    )
