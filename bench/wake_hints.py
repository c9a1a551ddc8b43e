"""Database acquisitions per job with 8 idle workers, with and without wake hints.

python bench/wake_hints.py CONFIG_JSON     (one JSON line with the counts)

CONFIG_JSON: ``state`` (URL shared by every worker), ``notify`` (URL; each worker and the
starter open their own adapter), ``n`` (chains), ``workers`` [8], ``gap`` [0.05 s between a
chain's completion and the next start], ``poll_interval`` [30 s: long enough that no poll
falls inside the run].

Every worker is a :class:`Worker` with concurrency 1 and its own :class:`Client`, whose state
adapter is wrapped in :class:`CountingState` (counts ``jobs_acquire`` and every other state
operation) and whose notify adapter is wrapped in :class:`CountingNotify` (counts the wake
hints it was granted and denied). All workers live in one process, which keeps the counters
in one place; they still share nothing but the database and the broker. The starter commits
one chain at a time and waits for its handler to finish, so every chain meets 8 idle workers.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import jobchain
from jobchain import Client, JobTypes
from jobchain.contracts import Capability, NotifyAdapter, StateAdapter, StateTx
from jobchain.contracts.notify import Listener, Unsubscribe
from jobchain.contracts.state import (
    BlockedJobsList,
    ChainGet,
    ChainJobsList,
    ChainsDelete,
    ChainsDeleted,
    ChainsList,
    JobBlockersGet,
    JobComplete,
    JobCompleted,
    JobCreated,
    JobGet,
    JobNextAvailable,
    JobRenewLease,
    JobReschedule,
    JobsAcquire,
    JobsAcquired,
    JobsCreate,
    JobsList,
    JobsReapExpired,
    JobsTrigger,
    JobsTriggered,
    WorkerHeartbeat,
    WorkerHeartbeatResult,
    WorkersList,
)
from jobchain.entities import Chain, Job, Page, WorkerInfo
from jobchain.worker import Attempt, Completed, Processors, Worker

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import emit, percentile, run_loop

types = JobTypes()
noop = types.define("bench.noop", input=None, output=None, entry=True)


class Tally:
    """One worker's counters (its state and notify proxies write here)."""

    def __init__(self) -> None:
        self.just_completed = False  # set by the handler: this worker's next claim is its re-check
        self.reset()

    def reset(self) -> None:
        self.ops: Counter[str] = Counter()
        self.acquire_empty = 0
        self.acquire_after_own_completion = 0
        self.hints_granted = 0
        self.hints_denied = 0


class CountingTx:
    """Forwards every StateTx operation, counting each; ``jobs_acquire`` is classified."""

    def __init__(self, inner: StateTx, tally: Tally) -> None:
        self._inner = inner
        self._tally = tally

    @asynccontextmanager
    async def _savepoint(self) -> AsyncIterator[StateTx]:
        async with self._inner.savepoint() as inner:
            yield CountingTx(inner, self._tally)

    def savepoint(self) -> AbstractAsyncContextManager[StateTx]:
        return self._savepoint()

    async def jobs_acquire(self, params: JobsAcquire) -> JobsAcquired:
        tally = self._tally
        tally.ops["jobs_acquire"] += 1
        if tally.just_completed:
            tally.just_completed = False
            tally.acquire_after_own_completion += 1
        acquired = await self._inner.jobs_acquire(params)
        if not acquired.jobs:
            tally.acquire_empty += 1
        return acquired

    async def jobs_create(self, params: JobsCreate) -> list[JobCreated]:
        self._tally.ops["jobs_create"] += 1
        return await self._inner.jobs_create(params)

    async def chain_get(self, params: ChainGet) -> Chain | None:
        self._tally.ops["chain_get"] += 1
        return await self._inner.chain_get(params)

    async def job_get(self, params: JobGet) -> Job | None:
        self._tally.ops["job_get"] += 1
        return await self._inner.job_get(params)

    async def job_blockers_get(self, params: JobBlockersGet) -> list[Chain]:
        self._tally.ops["job_blockers_get"] += 1
        return await self._inner.job_blockers_get(params)

    async def job_next_available(self, params: JobNextAvailable) -> timedelta | None:
        self._tally.ops["job_next_available"] += 1
        return await self._inner.job_next_available(params)

    async def job_renew_lease(self, params: JobRenewLease) -> Job:
        self._tally.ops["job_renew_lease"] += 1
        return await self._inner.job_renew_lease(params)

    async def job_reschedule(self, params: JobReschedule) -> Job:
        self._tally.ops["job_reschedule"] += 1
        return await self._inner.job_reschedule(params)

    async def job_complete(self, params: JobComplete) -> JobCompleted:
        self._tally.ops["job_complete"] += 1
        return await self._inner.job_complete(params)

    async def jobs_reap_expired(self, params: JobsReapExpired) -> list[Job]:
        self._tally.ops["jobs_reap_expired"] += 1
        return await self._inner.jobs_reap_expired(params)

    async def worker_heartbeat(self, params: WorkerHeartbeat) -> WorkerHeartbeatResult:
        self._tally.ops["worker_heartbeat"] += 1
        return await self._inner.worker_heartbeat(params)

    async def workers_list(self, params: WorkersList) -> list[WorkerInfo]:
        self._tally.ops["workers_list"] += 1
        return await self._inner.workers_list(params)

    async def jobs_trigger(self, params: JobsTrigger) -> JobsTriggered:
        self._tally.ops["jobs_trigger"] += 1
        return await self._inner.jobs_trigger(params)

    async def chains_delete(self, params: ChainsDelete) -> ChainsDeleted:
        self._tally.ops["chains_delete"] += 1
        return await self._inner.chains_delete(params)

    async def chains_list(self, params: ChainsList) -> Page[Chain]:
        self._tally.ops["chains_list"] += 1
        return await self._inner.chains_list(params)

    async def jobs_list(self, params: JobsList) -> Page[Job]:
        self._tally.ops["jobs_list"] += 1
        return await self._inner.jobs_list(params)

    async def chain_jobs_list(self, params: ChainJobsList) -> Page[Job]:
        self._tally.ops["chain_jobs_list"] += 1
        return await self._inner.chain_jobs_list(params)

    async def blocked_jobs_list(self, params: BlockedJobsList) -> Page[Job]:
        self._tally.ops["blocked_jobs_list"] += 1
        return await self._inner.blocked_jobs_list(params)


class CountingState:
    """A StateAdapter whose transactions are :class:`CountingTx` (and counted themselves)."""

    def __init__(self, inner: StateAdapter, tally: Tally) -> None:
        self._inner = inner
        self._tally = tally
        self.capabilities: frozenset[Capability] = inner.capabilities
        self.time_precision: timedelta = inner.time_precision

    @asynccontextmanager
    async def _transaction(self, read_only: bool, connection: object | None) -> AsyncIterator[StateTx]:
        self._tally.ops["transaction"] += 1
        async with self._inner.transaction(read_only=read_only, connection=connection) as inner:
            yield CountingTx(inner, self._tally)

    def transaction(
        self, *, read_only: bool = False, connection: object | None = None
    ) -> AbstractAsyncContextManager[StateTx]:
        return self._transaction(read_only, connection)

    async def migrate(self) -> None:
        await self._inner.migrate()

    async def close(self) -> None:
        await self._inner.close()


class CountingNotify:
    """A NotifyAdapter that counts the wake hints its worker was granted and denied."""

    def __init__(self, inner: NotifyAdapter, tally: Tally) -> None:
        self._inner = inner
        self._tally = tally
        self.capabilities: frozenset[Capability] = inner.capabilities

    async def publish_job_scheduled(self, type_name: str) -> None:
        await self._inner.publish_job_scheduled(type_name)

    async def listen_job_scheduled(self, type_names: Sequence[str], listener: Listener) -> Unsubscribe:
        return await self._inner.listen_job_scheduled(type_names, listener)

    async def publish_chain_completed(self, chain_id: str) -> None:
        await self._inner.publish_chain_completed(chain_id)

    async def listen_chain_completed(self, chain_id: str, listener: Listener) -> Unsubscribe:
        return await self._inner.listen_chain_completed(chain_id, listener)

    async def publish_job_ownership_lost(self, job_id: str) -> None:
        await self._inner.publish_job_ownership_lost(job_id)

    async def listen_job_ownership_lost(self, job_id: str, listener: Listener) -> Unsubscribe:
        return await self._inner.listen_job_ownership_lost(job_id, listener)

    async def provide_wake_hint(self, type_name: str, count: int) -> None:
        await self._inner.provide_wake_hint(type_name, count)

    async def consume_wake_hint(self, type_name: str) -> bool:
        wake = await self._inner.consume_wake_hint(type_name)
        if wake:
            self._tally.hints_granted += 1
        else:
            self._tally.hints_denied += 1
        return wake

    async def close(self) -> None:
        await self._inner.close()


async def counting_client(state: str, notify: str, tally: Tally) -> Client:
    """A Client of its own (own state and notify adapters), both wrapped for counting."""
    base = await jobchain.connect(state, notify=notify, job_types=types, observers=())
    assert base.notify is not None
    return Client(CountingState(base.state, tally), CountingNotify(base.notify, tally), types)


def worker_processors(tally: Tally, started: dict[str, float], done: dict[str, asyncio.Event]) -> Processors:
    procs = Processors()

    async def handle(attempt: Attempt[None, None]) -> Completed:
        started[attempt.job.chain_id] = time.monotonic()
        result = await attempt.complete(None)
        # Returning frees the slot, which makes this worker look for more work once.
        tally.just_completed = True
        done[attempt.job.chain_id].set()
        return result

    procs.register(noop, handle)
    return procs


async def run(cfg: dict[str, Any]) -> dict[str, Any]:
    n, count = cfg["n"], cfg.get("workers", 8)
    gap, poll = cfg.get("gap", 0.05), cfg.get("poll_interval", 30.0)
    starter = await jobchain.connect(cfg["state"], notify=cfg["notify"], job_types=types, observers=())
    await starter.state.migrate()
    tallies = [Tally() for _ in range(count)]
    clients = [await counting_client(cfg["state"], cfg["notify"], t) for t in tallies]
    started: dict[str, float] = {}
    done: dict[str, asyncio.Event] = {}
    workers = [
        Worker(c, worker_processors(t, started, done), name=f"w{i}", concurrency=1, poll_interval=poll)
        for i, (c, t) in enumerate(zip(clients, tallies, strict=True))
    ]
    samples: list[float] = []
    try:
        for worker in workers:
            await worker.start()
        await asyncio.sleep(1.0)  # every worker subscribed, made its first claim and went idle
        for tally in tallies:
            tally.reset()
        for _ in range(n):
            async with starter.transaction() as tx:
                chain = await starter.start_chain(tx, noop, None)
                done[chain.id] = asyncio.Event()
                t_commit = time.monotonic()  # just before COMMIT is sent, as in jc.py latency
            await asyncio.wait_for(done[chain.id].wait(), timeout=3 * poll)
            samples.append((started[chain.id] - t_commit) * 1000)
            await asyncio.sleep(gap)  # the woken workers' claims settle before the next start
        await asyncio.sleep(0.5)
        ops: Counter[str] = Counter()
        for tally in tallies:
            ops.update(tally.ops)
        result = {
            "n": n,
            "workers": count,
            "hints": Capability.WAKE_HINTS in clients[0].notify.capabilities if clients[0].notify else False,
            "acquire_per_job": ops["jobs_acquire"] / n,
            "empty_per_job": sum(t.acquire_empty for t in tallies) / n,
            "after_own_completion_per_job": sum(t.acquire_after_own_completion for t in tallies) / n,
            "hints_granted_per_job": sum(t.hints_granted for t in tallies) / n,
            "hints_denied_per_job": sum(t.hints_denied for t in tallies) / n,
            "state_ops_per_job": {k: v / n for k, v in sorted(ops.items())},
            "wake_p50_ms": percentile(samples, 0.5),
            "wake_p99_ms": percentile(samples, 0.99),
        }
    finally:
        for worker in workers:
            await worker.stop()
        for client in clients:
            await client.close()
        await starter.close()
    return result


def main(argv: list[str]) -> None:
    if len(argv) != 1:
        raise SystemExit(__doc__)
    with contextlib.suppress(KeyboardInterrupt):
        emit(run_loop(run(json.loads(argv[0]))))


if __name__ == "__main__":
    main(sys.argv[1:])
