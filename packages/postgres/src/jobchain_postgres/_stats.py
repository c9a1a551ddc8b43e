"""queue_stats of PostgresStateTx: one pipeline (one round trip) around one statement.

The statement (``sql/queue_stats.sql``) returns one row per listed type, each also carrying the
clock and the throughput buckets. It is sent between ``jit_off`` and ``jit_restore``: its cost
estimate grows with the table, and JIT compilation of a plan that large costs more than the
plan's run.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from jobchain.contracts.state import QueueStatsGet
from jobchain.stats import (
    ERROR_TYPES_KEPT,
    AttemptDurations,
    QueueStats,
    ThroughputBucket,
    TypeStats,
    WindowCounts,
)
from jobchain_postgres._results import check_now
from jobchain_postgres.queries import Queries
from jobchain_postgres.rows import Row, Shape, utc, utc_or_none

__all__ = ["StatsMixin", "bucket_starts"]

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
MICROSECOND = timedelta(microseconds=1)


def bucket_starts(now: datetime, window: timedelta, step: timedelta) -> list[datetime]:
    """``ceil(window / step)`` bucket starts at whole multiples of ``step`` since the epoch, the
    last one holding ``now``, oldest first (integer microseconds, as the statement counts them)."""
    step_us = step // MICROSECOND
    count = -(-(window // MICROSECOND) // step_us)
    last = EPOCH + step * ((now - EPOCH) // MICROSECOND // step_us)
    return [last - step * (count - 1 - index) for index in range(count)]


def _params(params: QueueStatsGet) -> dict[str, Any]:
    buckets = 0
    if params.throughput_window is not None:
        buckets = -(-(params.throughput_window // MICROSECOND) // (params.throughput_step // MICROSECOND))
    return {
        "now": check_now(params.now),
        "type_names": list(dict.fromkeys(params.type_names)) or None,
        "windows": list(params.windows),
        "duration_window": params.duration_window,
        "duration_sample": params.duration_sample,
        "error_types_kept": ERROR_TYPES_KEPT,
        "buckets": buckets,
        "step_us": params.throughput_step // MICROSECOND,
    }


def _type_stats(shape: Shape, row: Row, windows: Sequence[timedelta]) -> TypeStats:
    def figure(name: str) -> Any:
        return shape.scalar(row, name)

    completed, failed, cancelled = (
        figure("recent_completed") or [],
        figure("recent_failed") or [],
        figure("recent_cancelled") or [],
    )
    durations = None
    if figure("sample_count"):
        p50, p95, p99 = figure("sample_percentiles")
        durations = AttemptDurations(
            count=figure("sample_count"), p50=p50, p95=p95, p99=p99, max=figure("sample_max")
        )
    pending, due = figure("pending"), figure("due")
    return TypeStats(
        type_name=figure("type_name"),
        blocked=figure("blocked"),
        pending=pending,
        due=due,
        scheduled=pending - due,
        running=figure("running"),
        expired_leases=figure("expired_leases"),
        completed=figure("completed"),
        failed=figure("failed"),
        cancelled=figure("cancelled"),
        oldest_due_at=utc_or_none(figure("oldest_due_at")),
        failed_by_error_type=dict(
            zip(figure("error_type_names") or [], figure("error_type_counts") or [], strict=True)
        ),
        recent=tuple(
            WindowCounts(window=window, completed=completed[i], failed=failed[i], cancelled=cancelled[i])
            for i, window in enumerate(windows)
        ),
        durations=durations,
        paused=bool(figure("paused")),
    )


class StatsMixin:
    """queue_stats; the transaction class supplies ``_q`` and ``_rows_without_jit``."""

    _q: Queries

    async def _rows_without_jit(
        self, query: bytes, params: Mapping[str, Any], *, write: bool
    ) -> tuple[Shape, list[Row]]:
        raise NotImplementedError  # pragma: no cover - provided by PostgresStateTx

    async def queue_stats(self, params: QueueStatsGet) -> QueueStats:
        """Queue health per job type at one instant (see :class:`jobchain.stats.QueueStats`).

        One round trip; every figure read through an index (see ``sql/queue_stats.sql``).
        """
        shape, rows = await self._rows_without_jit(self._q.queue_stats, _params(params), write=False)
        head = rows[0]
        now = utc(shape.scalar(head, "now"))
        throughput: tuple[ThroughputBucket, ...] = ()
        if params.throughput_window is not None:
            completed = shape.scalar(head, "throughput_completed")
            failed = shape.scalar(head, "throughput_failed")
            throughput = tuple(
                ThroughputBucket(start=start, completed=completed[i], failed=failed[i])
                for i, start in enumerate(
                    bucket_starts(now, params.throughput_window, params.throughput_step)
                )
            )
        windows = list(params.windows)
        types = [
            _type_stats(shape, row, windows) for row in rows if shape.scalar(row, "type_name") is not None
        ]
        types.sort(key=lambda stats: stats.type_name)  # code point order, whatever the collation
        return QueueStats(now=now, types=tuple(types), throughput=throughput)
