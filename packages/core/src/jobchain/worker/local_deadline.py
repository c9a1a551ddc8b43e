"""The worker's own view of how long it still holds a claimed job, on its monotonic clock.

The database decides who holds a job, but its answer can arrive late: a claim reply held up by
a partition, a job that waited in the prefetch buffer behind a stalled handler. So each job
carries a local deadline counted from the moment its claim (or the last renewal) was *sent* —
the database set the lease after that moment, so the local deadline is never later than the
real expiry — less a safety margin for clock drift and scheduling delay. A job past it is not
started: the worker cannot know that nobody else runs it by now.
"""

from __future__ import annotations

MARGIN_FRACTION = 0.1
"""The safety margin as a share of the lease ..."""
MIN_MARGIN_SECONDS = 0.5
MAX_MARGIN_SECONDS = 10.0
"""... at least half a second and at most ten, never more than a quarter of the lease (a job
buffered past half its lease is renewed before it starts: that window must stay open)."""


def safety_margin(lease_seconds: float) -> float:
    """Seconds of a ``lease_seconds`` lease the worker does not count on."""
    margin = min(MAX_MARGIN_SECONDS, max(MIN_MARGIN_SECONDS, lease_seconds * MARGIN_FRACTION))
    return min(margin, lease_seconds / 4)


def local_deadline(sent_at: float, lease_seconds: float) -> float:
    """The monotonic time after which a job leased by a request sent at ``sent_at`` may be gone."""
    return sent_at + lease_seconds - safety_margin(lease_seconds)


__all__ = ["local_deadline", "safety_margin"]
