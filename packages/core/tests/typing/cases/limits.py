"""The documented limit: two job types with the same input and output types are one type to mypy."""

from __future__ import annotations

from shop import Order, Receipt, refund, types

from jobchain import JobType
from jobchain.worker import Attempt, Completed

# Same input and output types as refund, not in place_order's continues_with.
chargeback = types.define("chargeback", input=Order, output=Receipt)


async def on_place_order(
    attempt: Attempt[Order, None, tuple[JobType[Order, None], JobType[Order, Receipt]]],
) -> Completed:
    await attempt.continue_with(refund, attempt.input)
    return await attempt.continue_with(chargeback, attempt.input)  # not caught: the run-time check refuses it
