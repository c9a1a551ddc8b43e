"""Blocker outputs reach the handler typed: blocker_output(job_type) returns the type's output."""

from __future__ import annotations

from shop import Order, Receipt, quote, refund

from jobchain.worker import Attempt, Completed


async def total(attempt: Attempt[Order, int]) -> Completed:
    price = await attempt.blocker_output(quote)
    receipts = await attempt.blocker_outputs(refund)
    # E: Argument 1 to "blocker_output" of "Attempt" has incompatible type "JobType[Order, int,
    # fix: first: Receipt = await attempt.blocker_output(refund, chain="chain-id")
    first: Receipt = await attempt.blocker_output(quote)
    # E: Unsupported operand types for + ("int" and "Receipt")
    # fix: return await attempt.complete(price + len(receipts) + len(first.number))
    return await attempt.complete(price + receipts[0] + len(first.number))
