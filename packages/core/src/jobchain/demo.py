"""``python -m jobchain.demo`` (``make demo``): a real worker running a chain on the embedded default.

The state lives in the embedded default (a SQLite file, ``jobchain.db`` in the working
directory, unless ``JOBCHAIN_STATE_URL`` says otherwise); notifications are in-process.

The chain ``demo.order``: ``place_order`` starts two blocker chains (inventory check and
payment) and continues with ``pack``, which waits for both; payment fails once (a simulated
timeout) and is retried; ``ship`` finishes the chain.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from datetime import timedelta

import jobchain
from jobchain import JobTypes
from jobchain.worker import Attempt, Backoff, Completed, Processors, Worker

types = JobTypes()


@dataclass
class Order:
    order_id: str
    items: list[str]
    amount_cents: int


@dataclass
class Checked:
    in_stock: bool


@dataclass
class Charged:
    receipt: str


@dataclass
class Parcel:
    order_id: str
    parcels: int


@dataclass
class Shipment:
    order_id: str
    tracking: str


check_inventory = types.define("demo.check_inventory", input=Order, output=Checked, entry=True)
charge_payment = types.define(
    "demo.charge_payment",
    input=Order,
    output=Charged,
    entry=True,
    retry=Backoff(initial=timedelta(seconds=0.5), maximum=timedelta(seconds=2)),
)
ship = types.define("demo.ship", input=Parcel, output=Shipment)
pack = types.define(
    "demo.pack",
    input=Order,
    output=None,
    continues_with=(ship,),
    blockers=[check_inventory, charge_payment],
)
place_order = types.define("demo.place_order", input=Order, output=None, entry=True, continues_with=(pack,))

processors = Processors()
started_at = time.monotonic()


def say(message: str) -> None:
    print(f"[{time.monotonic() - started_at:6.2f}s] {message}", flush=True)


@processors.handler(place_order)
async def handle_place_order(attempt: Attempt[Order, None]) -> Completed:
    order = attempt.input
    # Atomic: the two blocker chains commit together with the continuation, or not at all.
    await attempt.prepare("atomic")
    inventory = await attempt.start_chain(check_inventory, order)
    payment = await attempt.start_chain(charge_payment, order)
    say(f"place_order {order.order_id}: started inventory and payment chains; pack waits for both")
    return await attempt.continue_with(pack, order, blockers=[inventory.chain, payment.chain])


@processors.handler(check_inventory)
async def handle_check_inventory(attempt: Attempt[Order, Checked]) -> Completed:
    say(f"check_inventory: {len(attempt.input.items)} items in stock")
    return await attempt.complete(Checked(in_stock=True))


@processors.handler(charge_payment)
async def handle_charge_payment(attempt: Attempt[Order, Charged]) -> Completed:
    if attempt.job.attempt == 1:
        say("charge_payment: attempt 1 failed (simulated card network timeout), retrying with backoff")
        raise TimeoutError("card network timeout (simulated)")
    say(f"charge_payment: attempt {attempt.job.attempt} charged {attempt.input.amount_cents / 100:.2f}")
    return await attempt.complete(Charged(receipt=f"R-{attempt.input.order_id}"))


@processors.handler(pack)
async def handle_pack(attempt: Attempt[Order, None]) -> Completed:
    blockers = await attempt.blockers()
    outputs = ", ".join(f"{chain.type_name}={chain.output}" for chain in blockers)
    say(f"pack: both blockers done ({outputs})")
    parcel = Parcel(order_id=attempt.input.order_id, parcels=(len(attempt.input.items) + 1) // 2)
    return await attempt.continue_with(ship, parcel)


@processors.handler(ship)
async def handle_ship(attempt: Attempt[Parcel, Shipment]) -> Completed:
    parcel = attempt.input
    say(f"ship: {parcel.parcels} parcels for {parcel.order_id}")
    return await attempt.complete(Shipment(order_id=parcel.order_id, tracking=f"TRK-{parcel.order_id}"))


async def main() -> None:
    client = await jobchain.connect(notify="memory://", job_types=types)
    async with client:
        await client.state.migrate()
        say(f"state: {type(client.state).__name__}, notify: in-process")
        async with Worker(client, processors, name="demo", concurrency=4, poll_interval=1.0):
            async with client.transaction() as tx:
                started = await client.start_chain(
                    tx,
                    place_order,
                    Order(order_id="A-1001", items=["mug", "tea", "spoon"], amount_cents=2450),
                )
            say(f"started chain {started.id} ({started.chain.type_name})")
            chain = await client.await_chain(started.id, timeout=30, poll_interval=1.0)
        jobs = await client.list_chain_jobs(chain.id)
        say(f"chain {chain.status}: {' -> '.join(job.type_name for job in jobs.items)}")
        say(f"output: {ship.decode_output(chain.output)}")


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING, format="         log %(levelname)s %(name)s: %(message)s")
    asyncio.run(main())
