"""Annotations written before the typed graph keep type-checking (no expected errors here)."""

from __future__ import annotations

from typing import Any

from shop import Order, Receipt, pack, place_order, quote, refund

from jobchain import Client, Completion, JobType, JobTypes, Transaction
from jobchain.worker import Attempt, Completed, Processors

legacy_types = JobTypes()
step = legacy_types.define("step", input=int, output=None, entry=True, continues_with=["tail"])
tail = legacy_types.define("tail", input=int, output=str, continues_with=[step])
legacy_place_order = legacy_types.define("legacy_place", input=Order, output=None, entry=True)
flag = bool(len("x"))
maybe_entry = legacy_types.define("maybe", input=None, output=None, entry=flag)


async def start_any(client: Client, tx: Transaction, job_type: JobType[Order, Any]) -> None:
    await client.start_chain(tx, job_type, Order("o-1"))


async def start_loosely(client: Client, tx: Transaction, job_type: JobType[Any, Any]) -> None:
    await client.start_chain(tx, job_type, {"id": "o-1"})


def takes_two(job_type: JobType[Order, None]) -> str:
    return job_type.name


async def on_step(attempt: Attempt[int, None]) -> Completed:
    return await attempt.continue_with(tail, attempt.input + 1)


async def on_place_order(attempt: Attempt[Order, None]) -> Completed:
    return await attempt.continue_with(pack, attempt.input)


async def any_attempt(attempt: Attempt[Any, Any, Any]) -> str:
    return attempt.job.id


async def typed(
    attempt: Attempt[Order, None, tuple[JobType[Order, None], JobType[Order, Receipt]]],
) -> Completed:
    await any_attempt(attempt)
    return await attempt.continue_with(pack, attempt.input)


async def by_hand(completion: Completion[Any, Any]) -> None:
    await completion.continue_with(refund, Order("o-1"))


async def everything(client: Client, tx: Transaction) -> None:
    await client.start_chain(tx, step, 1)
    await client.start_chain(tx, quote, Order("o-2"))
    for entry_type in [place_order, legacy_place_order]:
        await client.start_chain(tx, entry_type, Order("o-3"))
    await client.complete_chain(tx, place_order, "chain-id", by_hand)


processors = Processors()
processors.register(step, on_step)
processors.register(place_order, on_place_order)
processors.register(legacy_place_order, typed)
names: list[str] = [takes_two(place_order), takes_two(pack)]
receipt: JobType[Order, Receipt] = refund
