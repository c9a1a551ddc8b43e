"""The claim loop yields to the event loop on every round, also when there is nothing to wait
for and the state answers without ever suspending (the in-process adapter).

A round that finds a due job it may not claim yet (its slot still held by an attempt that has
just finished) computes a wait of zero. Returning without a yield made the loop spin on the
in-process adapter and starve the very attempt whose ending would let it claim: a chain then
never completed (seen in the NATS integration suite on memory state, issue 33).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from jobchain import Client, JobTypes
from jobchain.memory.notify import MemoryNotifyAdapter
from jobchain.memory.state import MemoryStateAdapter
from jobchain.worker import Attempt, Completed, Processors, Worker


@dataclass
class Num:
    n: int


async def test_a_round_with_nothing_to_wait_for_lets_other_tasks_run() -> None:
    types = JobTypes()
    work = types.define("work", input=Num, output=None, entry=True)
    procs = Processors()

    @procs.handler(work)
    async def handle(attempt: Attempt[Num, None]) -> Completed:
        return await attempt.complete(None)

    client = Client(MemoryStateAdapter(), MemoryNotifyAdapter(), types)
    worker = Worker(client, procs, poll_interval=0.05)
    ran = asyncio.Event()
    asyncio.get_running_loop().call_soon(ran.set)
    await worker._sleep_or_wake(0)
    assert ran.is_set(), "a round with a zero wait returned without letting any other task run"
