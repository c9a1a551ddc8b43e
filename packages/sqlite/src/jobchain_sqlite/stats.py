"""``queue_stats`` on SQLite: one statement for the per-type figures, one for throughput.

Both run in the caller's transaction, so they read one snapshot. Every figure is read from a
partial index (see ``sql/queue_stats.sql`` and migration ``0006_queue_stats``); Python only
decodes the JSON arrays the statement packs per type, ranks the error types and takes the
duration percentiles with :func:`jobchain.stats.duration_percentiles`.
"""

from __future__ import annotations

import json
from collections import Counter
from datetime import UTC, datetime, timedelta

from jobchain.contracts.state import QueueStatsGet
from jobchain.entities import utcnow
from jobchain.stats import (
    ERROR_TYPES_KEPT,
    QueueStats,
    ThroughputBucket,
    TypeStats,
    WindowCounts,
    duration_percentiles,
)
from jobchain_sqlite.context import TxContext
from jobchain_sqlite.rows import Row, fmt_time, json_list, parse_time

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


async def queue_stats(ctx: TxContext, params: QueueStatsGet) -> QueueStats:
    """Every figure of :class:`QueueStats` at ``params.now`` (or now) in two statements at most."""
    now = params.now or utcnow()
    rows = await ctx.fetch(
        ctx.q.queue_stats,
        {
            "type_names": json_list(params.type_names),
            "every_type": 0 if params.type_names else 1,
            "now": fmt_time(now),
            "since": json_list(fmt_time(now - window) for window in params.windows),
            "duration_from": fmt_time(now - params.duration_window),
            "sample": params.duration_sample,
        },
    )
    types = tuple(_type_stats(row, params) for row in rows)
    throughput: tuple[ThroughputBucket, ...] = ()
    if params.throughput_window is not None:
        throughput = await _throughput(ctx, now, params.throughput_window, params.throughput_step)
    return QueueStats(now=now, types=types, throughput=throughput)


def _type_stats(row: Row, params: QueueStatsGet) -> TypeStats:
    errors: Counter[str] = Counter()
    for error_type, count in json.loads(row["failed_by_error_type"]):
        errors[error_type or ""] += count  # NULL (no recorded error) is reported as ""
    ranked = sorted(errors.items(), key=lambda item: (-item[1], item[0]))
    recent = sorted(json.loads(row["recent"]))  # [window index, completed, failed, cancelled]
    durations = json.loads(row["durations"])
    return TypeStats(
        type_name=row["type_name"],
        blocked=row["blocked"],
        pending=row["pending"],
        due=row["due"],
        scheduled=row["pending"] - row["due"],
        running=row["running"],
        expired_leases=row["expired_leases"],
        completed=row["completed"],
        failed=sum(errors.values()),
        cancelled=row["cancelled"],
        oldest_due_at=None if row["oldest_due_at"] is None else parse_time(row["oldest_due_at"]),
        failed_by_error_type=dict(ranked[:ERROR_TYPES_KEPT]),
        recent=tuple(
            WindowCounts(
                window=params.windows[index], completed=completed, failed=failed, cancelled=cancelled
            )
            for index, completed, failed, cancelled in recent
        ),
        durations=duration_percentiles(timedelta(microseconds=us) for us in durations),
        paused=bool(row["paused"]),
    )


def bucket_starts(now: datetime, window: timedelta, step: timedelta) -> list[datetime]:
    """``ceil(window / step)`` bucket starts at multiples of ``step`` since the Unix epoch, the
    last one holding ``now``, oldest first (integer microseconds: no float rounding)."""
    step_us = step // _MICROSECOND
    count = -(-(window // _MICROSECOND) // step_us)
    last = _EPOCH + step * ((now - _EPOCH) // _MICROSECOND // step_us)
    return [last - step * (count - 1 - index) for index in range(count)]


async def _throughput(
    ctx: TxContext, now: datetime, window: timedelta, step: timedelta
) -> tuple[ThroughputBucket, ...]:
    starts = bucket_starts(now, window, step)
    buckets = json.dumps([[fmt_time(start), fmt_time(start + step)] for start in starts])
    rows = await ctx.fetch(ctx.q.queue_stats_throughput, {"buckets": buckets})
    counts = {row["idx"]: (row["completed"], row["failed"]) for row in rows}
    return tuple(
        ThroughputBucket(start=start, completed=counts[index][0], failed=counts[index][1])
        for index, start in enumerate(starts)
    )


__all__ = ["bucket_starts", "queue_stats"]
