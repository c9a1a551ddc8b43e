"""pydantic v2 models as job inputs and outputs (``jobchain[pydantic]``, issue 37 d5).

Stored as ``model_dump(mode="json")`` and decoded with ``model_validate``, so the model's
own validation runs at the start and a failure is a JobTypeValidationError naming the path,
before anything is written; NUL in a model's string is refused like anywhere else.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

import pydantic
import pytest

from jobchain.errors import JobTypeValidationError
from jobchain.job_types import JobTypes
from jobchain.testing import RunOutcome, memory_client, run_until_idle
from jobchain.worker import Attempt, Completed, Processors


class Line(pydantic.BaseModel):
    sku: str
    quantity: int = pydantic.Field(gt=0)


class Order(pydantic.BaseModel):
    number: int
    placed_at: datetime
    lines: list[Line]


class Receipt(pydantic.BaseModel):
    total_items: int


@dataclass
class Wrapped:
    order: Order
    note: str


job_types = JobTypes()
receipt = job_types.define("receipt", input=Order, output=Receipt, entry=True)
wrapped = job_types.define("wrapped", input=Wrapped, output=None, entry=True)
processors = Processors()
seen: list[object] = []


@processors.handler(receipt)
async def on_receipt(attempt: Attempt[Order, Receipt]) -> Completed:
    seen.append(attempt.input)
    return await attempt.complete(Receipt(total_items=sum(line.quantity for line in attempt.input.lines)))


@processors.handler(wrapped)
async def on_wrapped(attempt: Attempt[Wrapped, None]) -> Completed:
    seen.append(attempt.input)
    return await attempt.complete(None)


ORDER = Order(number=7, placed_at=datetime(2026, 12, 7, 9, 30, tzinfo=UTC), lines=[Line(sku="a", quantity=2)])


async def test_a_model_goes_in_as_json_and_comes_back_as_the_model() -> None:
    seen.clear()
    client = memory_client(job_types)
    async with client.transaction() as tx:
        started = await client.start_chain(tx, receipt, ORDER)
    assert started.chain.root.input == {
        "number": 7,
        "placed_at": "2026-12-07T09:30:00Z",
        "lines": [{"sku": "a", "quantity": 2}],
    }
    assert [r.outcome for r in await run_until_idle(client, processors)] == [RunOutcome.COMPLETED]
    assert seen == [ORDER]
    assert isinstance(seen[0], Order)
    chain = await client.get_chain(started.id)
    assert chain is not None
    assert receipt.decode_output(chain.output) == Receipt(total_items=2)
    await client.close()


async def test_a_model_inside_a_dataclass_round_trips() -> None:
    seen.clear()
    client = memory_client(job_types)
    async with client.transaction() as tx:
        await client.start_chain(tx, wrapped, Wrapped(order=ORDER, note="gift"))
    await run_until_idle(client, processors)
    assert seen == [Wrapped(order=ORDER, note="gift")]
    await client.close()


def test_the_models_own_validation_refuses_the_start_naming_the_path() -> None:
    line = Line.model_construct(sku="b", quantity=0)  # not validated: what a bug would pass
    bad = Order.model_construct(number=8, placed_at=ORDER.placed_at, lines=[line])
    with pytest.raises(JobTypeValidationError) as caught:
        receipt.encode_input(bad)
    message = str(caught.value)
    assert "greater than 0" in message, message
    assert "lines[0].quantity: Input should be greater than 0" in message, message


def test_a_stored_value_that_no_longer_validates_is_a_typed_error() -> None:
    with pytest.raises(JobTypeValidationError, match="quantity"):
        receipt.decode_input({"number": 1, "placed_at": "2026-12-07T09:30:00Z", "lines": [{"sku": "c"}]})


def test_nul_in_a_models_string_is_refused_before_anything_is_written() -> None:
    with pytest.raises(JobTypeValidationError, match=r"\$\.lines\[0\]\.sku"):
        receipt.encode_input(
            Order(number=9, placed_at=ORDER.placed_at, lines=[Line(sku="a\x00", quantity=1)])
        )
