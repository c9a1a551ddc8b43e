"""Retention: a worker task that deletes finished chains once they are old enough.

Opt-in through ``Worker(retention=Retention(...))``. Every ``interval`` the pruner deletes the
terminal chains whose age (time since they finished: completed, failed or cancelled) passed
the age set for their status, in batches of ``batch_size`` (at most ``max_batches`` per run,
so one run stays short), through the state's ``chains_prune``, which deletes a chain with
all its jobs and keeps one still referenced as a blocker by a job outside the deleted set.
One prune runs at a time across all workers: a worker that finds another's prune in progress
skips its run. What was deleted is reported to the observers as one ``chains_pruned`` event
per run, with counts by status and by chain type.

Each run also deletes the state backend's deduplication bookkeeping last used more than
:data:`LOCKS_KEPT` ago (``ChainsPrune.locks_before``; a periodic schedule leaves one per
tick) and ordering-key rows whose last chain is gone, in batches of ``batch_size`` too.
"""

from __future__ import annotations

import asyncio
import logging
import math
import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from jobchain.contracts import ChainsPrune, PrunedChain
from jobchain.errors import InvalidArgumentError, SchemaNotMigratedError
from jobchain.worker.backoff import Backoff
from jobchain.worker.failures import now_of
from jobchain.worker.outage import FailureStreak, wait_or_timeout
from jobchain.worker.rescues import Emit

if TYPE_CHECKING:
    from jobchain.client import Client

log = logging.getLogger("jobchain.worker")

LOCKS_KEPT = timedelta(days=1)
"""Deduplication bookkeeping unused for this long is deleted by retention runs."""


def _age(name: str, value: object) -> timedelta | None:
    if value is None:
        return None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = timedelta(seconds=value)
    if not isinstance(value, timedelta):
        raise InvalidArgumentError(
            f"Retention.{name} must be a timedelta, or None to keep forever; got {value!r}"
        )
    seconds = value.total_seconds()
    if math.isnan(seconds) or math.isinf(seconds) or seconds <= 0:
        raise InvalidArgumentError(f"Retention.{name} must be a positive duration, got {value!r}")
    return value


@dataclass(frozen=True, slots=True, kw_only=True)
class Retention:
    """How long finished chains are kept, by status; ``None`` keeps them forever.

    ``Retention(completed=timedelta(days=7), failed=None, cancelled=timedelta(days=30))``
    deletes completed chains a week after they completed and cancelled ones a month after,
    and keeps failed chains (the dead letters) until they are retried or deleted.
    """

    completed: timedelta | None = None
    failed: timedelta | None = None
    cancelled: timedelta | None = None
    interval: timedelta = timedelta(minutes=1)
    """Time between prune runs."""
    batch_size: int = 500
    """Chains one ``chains_prune`` call deletes at most."""
    max_batches: int = 20
    """Batches one run deletes at most (the rest waits for the next run)."""

    def __post_init__(self) -> None:
        for name in ("completed", "failed", "cancelled"):
            object.__setattr__(self, name, _age(name, getattr(self, name)))
        interval = _age("interval", self.interval)
        if interval is None:
            raise InvalidArgumentError("Retention.interval must be a positive duration, not None")
        object.__setattr__(self, "interval", interval)
        for name in ("batch_size", "max_batches"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise InvalidArgumentError(f"Retention.{name} must be a positive integer, got {value!r}")
        if self.completed is None and self.failed is None and self.cancelled is None:
            raise InvalidArgumentError(
                "Retention keeps everything: set completed=, failed= or cancelled= (a timedelta)"
            )

    def cutoffs(self, now: datetime, limit: int | None = None) -> ChainsPrune:
        """The prune request for ``now``: each status's cutoff is ``now - age``."""
        return ChainsPrune(
            completed_before=now - self.completed if self.completed is not None else None,
            failed_before=now - self.failed if self.failed is not None else None,
            cancelled_before=now - self.cancelled if self.cancelled is not None else None,
            locks_before=now - LOCKS_KEPT,
            limit=limit or self.batch_size,
        )


class Pruner:
    """Runs retention every ``retention.interval`` (see the module docstring)."""

    def __init__(
        self,
        client: Client,
        retention: Retention,
        worker_id: str,
        *,
        emit: Emit,
        recovery: Backoff,
        jitter: Callable[[float], float] = lambda seconds: random.uniform(0, seconds / 10),
    ) -> None:
        self._client = client
        self.retention = retention
        self._worker_id = worker_id
        self._emit = emit
        self._recovery = recovery
        self._jitter = jitter
        self._streak = FailureStreak(log, f"worker {worker_id} pruner")
        self._task: asyncio.Task[None] | None = None
        self._stopping = False
        self._stop = asyncio.Event()
        self.runs = 0
        """Prune runs finished so far (a run that found another prune busy counts)."""

    def start(self) -> None:
        """Run the pruner task (its first run is at once)."""
        self._task = asyncio.create_task(self._run(), name=f"jobchain-pruner-{self._worker_id}")

    async def stop(self) -> None:
        """Stop the task (a prune in flight is cancelled; its transaction rolls back)."""
        self._stopping = True
        self._stop.set()
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def _run(self) -> None:
        failures = 0
        while not self._stopping:
            try:
                await self.prune()
                self._streak.succeeded()
                failures = 0
                wait = self.retention.interval.total_seconds()
                wait += self._jitter(wait)
            except asyncio.CancelledError:
                raise
            except SchemaNotMigratedError:
                return  # the loop stops the worker on the same error
            except Exception as error:
                failures += 1
                self._streak.failed(error, "old chains wait for the next try")
                self._emit(
                    "worker_error", {"error": repr(error), "operation": "chains_prune"}, log_line=False
                )
                wait = self._recovery.delay(failures).total_seconds()
            await wait_or_timeout(self._stop, wait)

    async def prune(self) -> list[PrunedChain]:
        """One run: delete batches of old chains (and bookkeeping) until both come back short."""
        request = self.retention.cutoffs(now_of(self._client))
        pruned: list[PrunedChain] = []
        for _ in range(self.retention.max_batches):
            async with self._client.state.transaction() as tx:
                result = await tx.chains_prune(request)
            if result.busy:
                break
            pruned += result.chains
            full = len(result.chains) >= request.limit or result.locks_deleted >= request.limit
            if not full or self._stopping:
                break
        self.runs += 1
        if pruned:
            by_status = Counter(chain.status for chain in pruned)
            by_type = Counter(chain.type_name for chain in pruned)
            log.info(
                "retention deleted %d finished chain(s): %s",
                len(pruned),
                ", ".join(f"{status} {count}" for status, count in sorted(by_status.items())),
            )
            self._emit(
                "chains_pruned",
                {"count": len(pruned), "by_status": dict(by_status), "by_type": dict(by_type)},
                log_line=False,
            )
        return pruned
