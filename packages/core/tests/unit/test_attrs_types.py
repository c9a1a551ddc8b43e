"""attrs classes as job inputs and outputs: accepted by define(), stored as plain JSON,
decoded with their validators run, refused with the field named."""

from __future__ import annotations

from datetime import UTC, datetime

import attrs
import pytest

from jobchain import JobTypes, JobTypeValidationError
from jobchain.testing import memory_client, run_until_idle
from jobchain.worker import Attempt, Completed, Processors


@attrs.frozen
class Line:
    sku: str
    quantity: int = attrs.field(validator=attrs.validators.gt(0))


@attrs.define
class Order:
    id: int
    placed_at: datetime
    lines: list[Line] = attrs.field(factory=list)


@attrs.define
class Total:
    items: int


PLACED = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
AT = "2026-01-02T03:04:05Z"


def test_an_attrs_input_round_trips_as_plain_json() -> None:
    place = JobTypes().define("place", input=Order, output=Total, entry=True)
    order = Order(7, PLACED, [Line("mug", 2), Line("tea", 1)])
    stored = place.encode_input(order)
    assert stored == {
        "id": 7,
        "placed_at": "2026-01-02T03:04:05Z",
        "lines": [{"sku": "mug", "quantity": 2}, {"sku": "tea", "quantity": 1}],
    }
    assert place.decode_input(stored) == order
    assert place.decode_output(place.encode_output(Total(3))) == Total(3)


@pytest.mark.parametrize(
    ("stored", "where"),
    [
        ({"id": "seven", "placed_at": AT}, "$.id"),
        ({"id": 7, "placed_at": AT, "lines": [{"sku": "mug", "quantity": 0}]}, "quantity"),
        ({"placed_at": AT}, "id"),
    ],
)
def test_a_bad_stored_value_names_the_field(stored: dict[str, object], where: str) -> None:
    place = JobTypes().define("place", input=Order, output=None, entry=True)
    with pytest.raises(JobTypeValidationError) as caught:
        place.decode_input(stored)
    assert where in caught.value.details, caught.value.details


def test_an_invalid_attrs_input_is_refused_at_start_and_nothing_is_written() -> None:
    place = JobTypes().define("place", input=Order, output=None, entry=True)
    with pytest.raises(JobTypeValidationError) as caught:
        place.encode_input(Order("seven", PLACED))  # type: ignore[arg-type]
    assert "$.id" in caught.value.details


async def test_a_handler_receives_the_attrs_instance() -> None:
    types = JobTypes()
    place = types.define("place", input=Order, output=Total, entry=True)
    processors = Processors()
    seen: list[Order] = []

    @processors.handler(place)
    async def handle(attempt: Attempt[Order, Total]) -> Completed:
        seen.append(attempt.input)
        return await attempt.complete(Total(sum(line.quantity for line in attempt.input.lines)))

    client = memory_client(types)
    async with client.transaction() as tx:
        started = await client.start_chain(tx, place, Order(7, PLACED, [Line("mug", 2)]))
    await run_until_idle(client, processors)
    assert seen == [Order(7, PLACED, [Line("mug", 2)])]
    chain = await client.get_chain(started.id)
    assert chain is not None
    assert place.decode_output(chain.output) == Total(2)
    await client.close()
