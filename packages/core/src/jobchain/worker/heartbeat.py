"""The worker's heartbeat: its registry row, kept fresh on a task of its own; dead peers' jobs released.

Every ``interval`` seconds (a little less, jittered) the worker upserts its row in one round
trip: who it is, what it serves, the jobs it holds (:class:`~jobchain.worker.slots.WorkerLoad`)
and that it stays alive for ``alive_for = interval * missed``. A row whose ``alive_until``
passed belongs to a dead worker; a heartbeat with ``release_dead`` marks it dead and returns
its running jobs to ``pending`` in the same statement, so they run again within seconds
instead of when each job's lease runs out.

The heartbeat runs beside the claim loop, never inside it: a loop that is saturated, stuck
in a slow claim or backing off after an outage does not stop it. At most one heartbeat is in
flight; one that gets no answer for ``alive_for`` (at least :data:`GIVE_UP_AFTER`) is
abandoned and counts as a failure.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.metadata
import logging
import os
import random
import socket
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from jobchain.contracts import WorkerHeartbeat, WorkerHeartbeatResult, WorkersList
from jobchain.entities import Job, WorkerState
from jobchain.errors import SchemaNotMigratedError
from jobchain.worker.liveness import Liveness
from jobchain.worker.outage import FailureStreak, wait_or_timeout
from jobchain.worker.rescues import Emit, emit_rescued, job_list, publish_rescued

if TYPE_CHECKING:
    from jobchain.client import Client
    from jobchain.worker.slots import WorkerLoad

log = logging.getLogger("jobchain.worker")

DEFAULT_HEARTBEAT_INTERVAL = 2.0
"""Seconds between a worker's heartbeats."""

DEFAULT_MISSED_HEARTBEATS = 3
"""Heartbeats a worker may miss before it counts as dead (``alive_for = interval * missed``)."""

PRUNE_AFTER = timedelta(hours=1)
"""How long a dead or stopped worker's row stays in the registry."""

GIVE_UP_AFTER = 5.0
"""Seconds after which a heartbeat that got no answer is abandoned (at least; or ``alive_for``).

A statement stuck on a broken connection could otherwise hold the one heartbeat in flight for
minutes. Not shorter: a slow but working database must not turn every heartbeat into a failure
(which would also keep the worker from ever releasing dead workers' jobs).
"""


def library_version() -> str:
    """The installed jobchain version, or ``"unknown"`` (running from a source tree)."""
    try:
        return importlib.metadata.version("jobchain")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerIdentity:
    """What a worker's registry row says about it besides its state and load."""

    worker_id: str
    name: str
    type_names: tuple[str, ...]
    concurrency: int
    host: str = ""
    pid: int = 0
    version: str = "unknown"

    @classmethod
    def of_this_process(
        cls, worker_id: str, name: str, type_names: tuple[str, ...], concurrency: int
    ) -> WorkerIdentity:
        """The identity of a worker running in this process, on this host."""
        return cls(
            worker_id=worker_id,
            name=name,
            type_names=type_names,
            concurrency=concurrency,
            host=socket.gethostname(),
            pid=os.getpid(),
            version=library_version(),
        )


BeatListener = Callable[[WorkerHeartbeatResult, bool], None]
"""Told of every successful heartbeat: its result, and whether it ended a run of failures."""


class Heartbeat:
    """Keeps one worker's registry row alive and releases the jobs of workers found dead."""

    def __init__(
        self,
        client: Client,
        identity: WorkerIdentity,
        *,
        interval: float,
        missed: int,
        load: Callable[[], WorkerLoad],
        on_beat: BeatListener,
        on_fatal: Callable[[BaseException], None],
        emit: Emit,
        clock: Callable[[], float] | None = None,
        on_presumed_dead: Callable[[], None] | None = None,
        liveness: Liveness | None = None,
    ) -> None:
        self._client = client
        self.identity = identity
        self.interval = interval
        self.alive_for = timedelta(seconds=interval * missed)
        self.state = WorkerState.RUNNING
        self._load = load
        self._on_beat = on_beat
        self._on_fatal = on_fatal
        self._on_presumed_dead = on_presumed_dead
        self._liveness = liveness
        self._emit = emit
        self._clock = clock
        self._streak = FailureStreak(log, f"worker {identity.worker_id} heartbeat", clock=self._now)
        # When the current run of successful heartbeats began (None while failing), and when the
        # last one succeeded.
        self._healthy_since: float | None = None
        self._last_success: float | None = None
        self._one_at_a_time = asyncio.Lock()
        self._poked = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._stopping = False
        self.beats = 0
        """Successful heartbeats so far."""
        self.incarnation = 1
        """Raised each time the worker learns it was presumed dead; its heartbeats carry it, and
        the state backend ignores those of an earlier incarnation (a late one cannot revive it)."""

    def _now(self) -> float:
        return self._clock() if self._clock is not None else asyncio.get_running_loop().time()

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        """Beat now, then every interval, on a task of its own."""
        self._task = asyncio.create_task(self._run(), name=f"jobchain-heartbeat-{self.identity.worker_id}")

    def set_state(self, state: WorkerState) -> None:
        """Report ``state`` from the next heartbeat on, which is sent at once."""
        self.state = state
        self._poked.set()

    def poke(self) -> None:
        """Send the next heartbeat now (or as soon as the one in flight ends)."""
        self._poked.set()

    async def stop(self) -> None:
        """Stop beating and record a clean stop (best effort: a dead database only delays it)."""
        task, self._task = self._task, None
        if task is None:
            return
        # The flag as well as the cancellation: a driver may turn a cancellation that lands
        # inside a statement into an error of its own, which beat() reports and _run retries.
        self._stopping = True
        self._poked.set()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        self.state = WorkerState.STOPPED
        with contextlib.suppress(SchemaNotMigratedError):
            await self.beat(give_up_after=GIVE_UP_AFTER)

    async def _run(self) -> None:
        while not self._stopping:
            try:
                result = await self.beat()
            except SchemaNotMigratedError:
                return  # reported through on_fatal: nothing to beat into
            if result is not None and self._liveness is not None and self._liveness.lapsed():
                # That answer came too late to count (it was sent before the deadline it
                # restores from): the worker starts nothing until one sent now is confirmed.
                continue
            # Jitter (never longer than the interval) keeps many workers from beating in step.
            delay = self.interval * random.uniform(0.8, 1.0)
            await wait_or_timeout(self._poked, delay)
            self._poked.clear()

    # ------------------------------------------------------------------ one heartbeat

    def releases_dead(self) -> bool:
        """Whether the next heartbeat may declare other workers dead.

        Only after this worker's own heartbeats have succeeded for ``alive_for`` without a
        failure and without a gap longer than ``alive_for`` between two of them. After a
        database outage every worker's row has expired; a worker that came back first must not
        declare the others dead (and take their running jobs) before they had the same
        ``alive_for`` to heartbeat again. A stall without errors (every heartbeat waiting on the
        database) is an outage too: its gap restarts the count. A freshly started worker waits
        the same.
        """
        since = self._healthy_since
        return since is not None and self._now() - since >= self.alive_for.total_seconds()

    async def beat(self, *, give_up_after: float | None = None) -> WorkerHeartbeatResult | None:
        """Send one heartbeat now (after any in flight); None if it failed.

        It is abandoned after ``give_up_after`` seconds (default: ``alive_for``, at least
        :data:`GIVE_UP_AFTER`).
        """
        async with self._one_at_a_time:
            load = self._load()
            params = WorkerHeartbeat(
                worker_id=self.identity.worker_id,
                name=self.identity.name,
                host=self.identity.host,
                pid=self.identity.pid,
                version=self.identity.version,
                type_names=list(self.identity.type_names),
                concurrency=self.identity.concurrency,
                inflight=load.inflight,
                buffered=load.buffered,
                committing=load.committing,
                capacity=load.capacity,
                state=self.state,
                alive_for=self.alive_for,
                release_dead=self.state is not WorkerState.STOPPED and self.releases_dead(),
                prune_after=PRUNE_AFTER,
                incarnation=self.incarnation,
            )
            give_up = give_up_after or max(self.alive_for.total_seconds(), GIVE_UP_AFTER)
            liveness = self._liveness
            sent = liveness.now() if liveness is not None else 0.0
            try:
                async with asyncio.timeout(give_up):
                    result = await self._send(params)
            except asyncio.CancelledError:
                raise
            except SchemaNotMigratedError as missing:
                log.error("worker %s cannot heartbeat: %s", self.identity.worker_id, missing)
                self._on_fatal(missing)
                raise
            except Exception as failure:
                error: Exception = failure
                if isinstance(failure, TimeoutError):  # its own text is empty
                    error = TimeoutError(f"no answer within {give_up:g} s")
                self._healthy_since = None
                self._streak.failed(error, "the worker keeps running and retries")
                self._emit(
                    "worker_error", {"error": repr(error), "operation": "worker_heartbeat"}, log_line=False
                )
                return None
            recovered = self._streak.succeeded()
            now = self._now()
            last, self._last_success = self._last_success, now
            if self._healthy_since is None or last is None or now - last > self.alive_for.total_seconds():
                self._healthy_since = now
            self.beats += 1
            if liveness is not None:
                if result.was_dead or params.state is WorkerState.STOPPED:
                    liveness.forget()  # a dead or stopped row is never marked dead
                else:
                    liveness.confirmed(sent)
        if result.was_dead:
            self._presumed_dead()
        if result.dead_worker_ids or result.released_jobs:
            await self._report_dead(result)
        self._on_beat(result, recovered)
        return result

    def _presumed_dead(self) -> None:
        """Another worker declared this one dead and released its jobs: stop their attempts,
        and rejoin under a new incarnation, so no late heartbeat of this one revives the row."""
        log.warning(
            "worker %s was presumed dead by another worker (no heartbeat for %.0f s) and its running "
            "jobs were released: it aborts their attempts and rejoins",
            self.identity.worker_id,
            self.alive_for.total_seconds(),
        )
        self._emit("worker_presumed_dead_self", {"incarnation": self.incarnation})
        self.incarnation += 1
        # It rejoins as a newcomer: no releasing of others before alive_for of good heartbeats.
        self._healthy_since = None
        if self._on_presumed_dead is not None:
            self._on_presumed_dead()
        self._poked.set()  # the rejoining heartbeat goes out now

    async def _send(self, params: WorkerHeartbeat) -> WorkerHeartbeatResult:
        async with self._client.transaction(autocommit=True) as tx:
            result = await tx.state.worker_heartbeat(params)
            publish_rescued(tx.hooks, result.released_jobs)
        return result

    async def _report_dead(self, result: WorkerHeartbeatResult) -> None:
        """One INFO line per dead worker; a ``job_rescued`` event per released job."""
        by_worker: dict[str, list[Job]] = {worker_id: [] for worker_id in result.dead_worker_ids}
        for job in result.released_jobs:
            by_worker.setdefault(job.rescued_from or "unknown", []).append(job)
        last_seen = await self._last_seen(list(by_worker))
        for worker_id, jobs in by_worker.items():
            seen = last_seen.get(worker_id)
            log.info(
                "worker %s presumed dead (no heartbeat since %s); released %d job(s)%s",
                worker_id,
                seen.isoformat() if seen is not None else "unknown",
                len(jobs),
                f": {job_list(jobs)}" if jobs else "",
            )
            self._emit(
                "worker_presumed_dead",
                {"dead_worker.id": worker_id, "released": len(jobs), "last_seen_at": seen},
            )
        emit_rescued(self._emit, result.released_jobs, "worker_dead")

    async def _last_seen(self, worker_ids: list[str]) -> dict[str, datetime]:
        # For the log line only, and only when a worker died: an extra read is cheap here.
        try:
            async with self._client.state.transaction(read_only=True) as tx:
                rows = await tx.workers_list(WorkersList(states=[WorkerState.DEAD.value]))
        except Exception:
            log.debug("could not read the dead workers' last heartbeat", exc_info=True)
            return {}
        wanted = set(worker_ids)
        return {row.id: row.last_seen_at for row in rows if row.id in wanted}
