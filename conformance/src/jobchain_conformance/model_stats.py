"""The queue-health invariant of the model (``model.py``): queue_stats and jobs_list(leased_by=).

:class:`StatsInvariants` is mixed into the model's state machine, which supplies ``both``,
``agree`` and the example's namespace. Every figure is compared at the machine's clock,
restricted to the example's types (plus one type with no jobs, which must read as zeros):
throughput counts every type, so it is left out here, where the adapter under test holds
earlier examples' rows too (the suite's example cases cover it).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from hypothesis.stateful import invariant

from jobchain.contracts import MAX_PAGE_SIZE, JobsList, QueueStatsGet, StateTx
from jobchain.entities import Job, Page
from jobchain.stats import QueueStats

T = TypeVar("T")

WINDOWS = (timedelta(seconds=10), timedelta(seconds=61), timedelta(minutes=5))
"""Whole seconds, like the clock's steps: a finish time can fall exactly on a window's start."""


def _summary(stats: QueueStats) -> list[dict[str, Any]]:
    """Every figure of every listed type, times in UTC, the error breakdown in its order."""
    rows = []
    for item in stats.types:
        row = {field.name: getattr(item, field.name) for field in dataclasses.fields(item)}
        row["failed_by_error_type"] = list(item.failed_by_error_type.items())
        if item.oldest_due_at is not None:
            row["oldest_due_at"] = item.oldest_due_at.astimezone(UTC)
        rows.append(row)
    return rows


class StatsInvariants:
    """After every step, queue_stats and jobs_list(leased_by=...) agree with the reference."""

    now: datetime
    types: tuple[str, str]
    workers: tuple[str, ...]

    # Supplied by the machine (model.make_state_machine).
    def both(self, op: Callable[[StateTx], Awaitable[T]]) -> tuple[Any, Any]:
        raise NotImplementedError

    def agree(self, label: str, outcomes: tuple[Any, Any], summary: Callable[[Any], Any]) -> Any:
        raise NotImplementedError

    @invariant()
    def stats_agree(self) -> None:
        """Checked after every step (an invariant, so the rules' mix and reach stay as they were)."""
        params = QueueStatsGet(
            type_names=(*self.types, f"{self.types[0]}-none"),
            windows=WINDOWS,
            duration_window=timedelta(minutes=5),
            duration_sample=2,  # small: the cap and its tie-break on equal completion times
            now=self.now,
        )
        self.agree("queue_stats", self.both(lambda tx: tx.queue_stats(params)), _summary)
        for worker_ids in (self.workers[:1], self.workers[1:]):
            self.agree(
                f"jobs_list(leased_by={list(worker_ids)})",
                self.both(_leased_by(worker_ids, self.types)),
                lambda page: sorted(job.id for job in page.items),
            )


def _leased_by(
    worker_ids: Sequence[str], type_names: Sequence[str]
) -> Callable[[StateTx], Awaitable[Page[Job]]]:
    """The listing of what ``worker_ids`` hold among ``type_names``' jobs, as an operation."""
    params = JobsList(leased_by=worker_ids, type_names=type_names, limit=MAX_PAGE_SIZE)
    return lambda tx: tx.jobs_list(params)
