"""Job types and handlers of the test app: a sync handler and an async one, both on the ORM."""

from __future__ import annotations

import threading
from dataclasses import dataclass

from django.db import connections

from djshop.models import Order, Receipt
from jobchain import JobTypes
from jobchain.worker import Attempt, Processors


@dataclass
class OrderRef:
    order_id: int
    alias: str


registry = JobTypes()
make_receipt = registry.define("djshop.make_receipt", input=OrderRef, output=int, entry=True)
count_receipts = registry.define("djshop.count_receipts", input=OrderRef, output=int, entry=True)

processors = Processors()


@processors.handler(make_receipt)
def handle_make_receipt(attempt: Attempt[OrderRef, int]) -> int:
    """Sync: runs in a thread, on that thread's Django connection."""
    ref = attempt.input
    order = Order.objects.using(ref.alias).filter(pk=ref.order_id).first()
    if order is None:  # no such order (any more): nothing to do
        return 0
    receipt = Receipt.objects.using(ref.alias).create(
        order=order, text=f"receipt for {order.name}", thread=threading.current_thread().name
    )
    # close_old_connections() ran before this call: the thread's connection is usable here.
    assert connections[ref.alias].connection is not None
    return int(receipt.pk)


@processors.handler(count_receipts)
async def handle_count_receipts(attempt: Attempt[OrderRef, int]) -> object:
    """Async: the ORM through its async API (never the sync one on the event loop)."""
    ref = attempt.input
    count = await Receipt.objects.using(ref.alias).filter(order_id=ref.order_id).acount()
    return await attempt.complete(count)
