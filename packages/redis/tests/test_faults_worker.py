"""Jobs keep completing through a Redis outage: notifications are hints, workers fall back to polling.

A private server per test is killed (SIGKILL) and restarted; never the shared service.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from jobchain import Client, JobStatus, JobTypes
from jobchain.memory.state import MemoryStateAdapter
from jobchain.worker import Attempt, Completed, Processors, Worker
from jobchain_redis import RedisNotifyAdapter, RedisNotifyOptions

N = 25
POLL = 0.1
"""Worker poll interval (seconds): the fallback that completes jobs whose wake-up was lost."""


@dataclass
class Num:
    n: int


@dataclass
class Total:
    total: int


def doubling() -> tuple[JobTypes, Any, Processors]:
    types = JobTypes()
    double = types.define("double", input=Num, output=Total, entry=True)
    procs = Processors()

    @procs.handler(double)
    async def handle(attempt: Attempt[Num, Total]) -> Completed:
        return await attempt.complete(Total(total=attempt.input.n * 2))

    return types, double, procs


async def start_and_await(client: Client, job_type: Any, numbers: range) -> None:
    chains = []
    for n in numbers:
        async with client.transaction() as tx:  # one commit (and one dropped wake-up) per chain
            chains.append((await client.start_chain(tx, job_type, Num(n=n))).chain)
    done = await asyncio.gather(*(client.await_chain(c.id, timeout=60, poll_interval=POLL) for c in chains))
    assert [c.status for c in done] == [JobStatus.COMPLETED] * len(numbers)
    assert [c.output for c in done] == [{"total": 2 * n} for n in numbers]


async def test_jobs_started_while_the_broker_is_down_all_complete(private_redis: Any) -> None:
    notify = await RedisNotifyAdapter.connect(
        private_redis.url,
        options=RedisNotifyOptions(prefix="faults", retry_interval=timedelta(milliseconds=50)),
    )
    types, double, procs = doubling()
    client = Client(MemoryStateAdapter(), notify, types)
    try:
        async with Worker(client, procs, concurrency=4, poll_interval=POLL):
            await start_and_await(client, double, range(3))  # broker up: woken by notifications
            private_redis.kill()
            await start_and_await(client, double, range(100, 100 + N))  # broker down: polling
            private_redis.start()
            await start_and_await(client, double, range(200, 200 + N))  # back: either way
    finally:
        await client.close()


async def test_workers_started_while_the_broker_is_down_complete_jobs(private_redis: Any) -> None:
    notify = await RedisNotifyAdapter.connect(
        private_redis.url,
        options=RedisNotifyOptions(prefix="faults", retry_interval=timedelta(milliseconds=50)),
    )
    types, double, procs = doubling()
    client = Client(MemoryStateAdapter(), notify, types)
    try:
        private_redis.kill()
        async with Worker(client, procs, concurrency=2, poll_interval=POLL):
            await start_and_await(client, double, range(N))
    finally:
        await client.close()
