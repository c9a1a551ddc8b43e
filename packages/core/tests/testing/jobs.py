"""The job types and handlers the run_until_idle tests run (a small shop)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from jobchain import JobTypes
from jobchain.worker import Attempt, Batch, Completed, Processors


@dataclass
class Order:
    id: int


@dataclass
class Log:
    """What the handlers did, in order (a test's own record to compare with run_until_idle's)."""

    calls: list[str] = field(default_factory=list)
    fail_first: int = 0
    """How many attempts of ``flaky`` fail before one succeeds."""


def build(log: Log, *, periodic: bool = False) -> tuple[JobTypes, Processors]:
    types = JobTypes()
    ship = types.define("ship", input=Order, output=str)
    charge = types.define("charge", input=Order, output=None, entry=True, continues_with=[ship])
    invoice = types.define("invoice", input=Order, output=str, entry=True, blockers=[charge])
    flaky = types.define("flaky", input=Order, output=str, entry=True)
    broken = types.define("broken", input=Order, output=None, entry=True, max_attempts=2)
    forever = types.define("forever", input=Order, output=None, entry=True, continues_with=["forever"])
    report = types.define("report", input=Order, output=str, entry=True)
    label = types.define("label", input=Order, output=str, entry=True)

    processors = Processors()

    @processors.handler(charge)
    async def on_charge(attempt: Attempt[Order, None]) -> Completed:
        log.calls.append(f"charge {attempt.input.id}")
        return await attempt.continue_with(ship, attempt.input)

    @processors.handler(ship)
    async def on_ship(attempt: Attempt[Order, str]) -> Completed:
        log.calls.append(f"ship {attempt.input.id}")
        return await attempt.complete(f"shipped {attempt.input.id}")

    @processors.handler(invoice)
    async def on_invoice(attempt: Attempt[Order, str]) -> Completed:
        blockers = await attempt.blockers()
        log.calls.append(f"invoice {attempt.input.id} after {[b.status.value for b in blockers]}")
        return await attempt.complete(f"invoiced {attempt.input.id}")

    @processors.handler(flaky)
    async def on_flaky(attempt: Attempt[Order, str]) -> Completed:
        log.calls.append(f"flaky attempt {attempt.job.attempt}")
        if attempt.job.attempt <= log.fail_first:
            raise ConnectionError("carrier API down")
        return await attempt.complete("delivered")

    @processors.handler(broken)
    async def on_broken(attempt: Attempt[Order, None]) -> Completed:
        log.calls.append(f"broken attempt {attempt.job.attempt}")
        raise ValueError("no such warehouse")

    @processors.handler(forever)
    async def on_forever(attempt: Attempt[Order, None]) -> Completed:
        return await attempt.continue_with(forever, Order(attempt.input.id + 1))

    # A synchronous handler: the worker runs it in a thread, as it would in production.
    def on_report(attempt: Attempt[Order, str]) -> str:
        log.calls.append(f"report {attempt.input.id}")
        return f"report {attempt.input.id}"

    processors.register(report, on_report)

    def on_labels(batch: Batch[Order, str]) -> Sequence[str]:
        log.calls.append(f"labels {sorted(order.id for order in batch.inputs)}")
        return [f"label {order.id}" for order in batch.inputs]

    processors.register_batch(label, on_labels, max_batch=10)
    if periodic:
        processors.periodic("*/5 * * * *", report, Order(0), name="five-minute-report", catch_up=False)
    return types, processors
