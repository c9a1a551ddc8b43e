"""The shop of bench/shop_truth.py: job types and handlers the two `jobchain worker` processes run.

Loaded by ``jobchain worker shop_truth_app:processors`` with bench/ on ``PYTHONPATH``. What each
handler does is decided by its input alone, so the orchestrator knows the expected counts by
construction:

- ``shop.charge`` (input: the order number): 3 ms; an order whose number is a multiple of
  :data:`CARD_EXPIRED_EVERY` raises :class:`CardExpired` (``max_attempts=1``: a dead letter);
  the others continue with ``shop.email``. Deadline :data:`FAST_TIMEOUT` s, far above 3 ms:
  only a slow commit counted as handler time could make it time out.
- ``shop.email`` (input: the order ref): 3 ms, completes the chain. Same deadline.
- ``shop.slow`` (input: a number): every :data:`SLOW_EVERY`-th sleeps :data:`SLOW_SLEEP` s past
  its :data:`SLOW_TIMEOUT` s deadline (``max_attempts=1``: a timed-out dead letter); the rest
  3 ms.
"""

from __future__ import annotations

import asyncio

from jobchain import JobTypes
from jobchain.worker import Attempt, Completed, Processors

CARD_EXPIRED_EVERY = 25
SLOW_EVERY = 10
SLOW_SLEEP = 3.0
SLOW_TIMEOUT = 1.0
FAST_TIMEOUT = 0.5
HANDLER_SLEEP = 0.003


class CardExpired(Exception):  # noqa: N818 -- the shop's own error name, as its dead letters show it
    """The card on file for an order has expired (carries the order ref)."""

    def __init__(self, ref: str) -> None:
        super().__init__(f"card expired for order {ref}")
        self.ref = ref


def order_ref(number: int) -> str:
    return f"ORD-{number:06d}"


types = JobTypes()
send_email = types.define("shop.email", input=str, output=str, timeout=FAST_TIMEOUT)
charge = types.define(
    "shop.charge",
    input=int,
    output=None,
    entry=True,
    continues_with=(send_email,),
    max_attempts=1,
    timeout=FAST_TIMEOUT,
)
slow = types.define("shop.slow", input=int, output=int, entry=True, max_attempts=1, timeout=SLOW_TIMEOUT)

processors = Processors()


@processors.handler(charge)
async def on_charge(attempt: Attempt[int, None]) -> Completed:
    await asyncio.sleep(HANDLER_SLEEP)
    ref = order_ref(attempt.input)
    if attempt.input % CARD_EXPIRED_EVERY == 0:
        raise CardExpired(ref)
    return await attempt.continue_with(send_email, ref)


@processors.handler(send_email)
async def on_email(attempt: Attempt[str, str]) -> Completed:
    await asyncio.sleep(HANDLER_SLEEP)
    return await attempt.complete(f"receipt sent for {attempt.input}")


@processors.handler(slow)
async def on_slow(attempt: Attempt[int, int]) -> Completed:
    await asyncio.sleep(SLOW_SLEEP if attempt.input % SLOW_EVERY == 0 else HANDLER_SLEEP)
    return await attempt.complete(attempt.input)
