"""Queue health: ``queue_stats`` (the figures are :class:`jobchain.stats.QueueStats`).

Part of the state contract (:class:`jobchain.contracts.StateTx`); every name is also importable
from ``jobchain.contracts`` and ``jobchain.contracts.state``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from jobchain.contracts._validation import _check_timedelta
from jobchain.errors import InvalidArgumentError
from jobchain.stats import DURATION_SAMPLE, DURATION_WINDOW, STATS_WINDOWS


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
