"""define() refuses input/output types the JSON boundary cannot encode and decode (issue 37).

Before, msgspec accepted any class as a declared type (it builds a decoder for a custom class
without complaint), so a pydantic model or a plain class passed define() and every start then
failed with "not JSON-serializable". Now define() walks the declared type and refuses any class
msgspec would need a hook for, naming it and what is supported; nothing is registered.
"""

from __future__ import annotations

import enum
import uuid
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any, Literal, TypedDict

import msgspec
import pytest

from jobchain.errors import InvalidArgumentError, NotJsonSerializableError
from jobchain.job_types import JobTypes


class PlainOrder:
    """A plain class with an __init__: no dataclass, no Struct, nothing msgspec can encode."""

    def __init__(self, order_id: str, count: int) -> None:
        self.order_id = order_id
        self.count = count


@dataclass
class Envelope:
    order: PlainOrder
    note: str = ""


@dataclass
class Order:
    order_id: str
    count: int


class Row(TypedDict):
    name: str


class Item(msgspec.Struct):
    sku: str
    children: list[Item] = []


class Colour(enum.Enum):
    RED = "red"


def _refused(types: JobTypes, **declared: Any) -> NotJsonSerializableError:
    with pytest.raises(NotJsonSerializableError) as caught:
        types.define("bad", entry=True, **declared)
    assert "bad" not in types, "a refused type must not be registered"
    return caught.value


class TestRefusedAtDefine:
    def test_plain_class_input_is_refused_naming_it_and_the_supported_types(self) -> None:
        error = _refused(JobTypes(), input=PlainOrder, output=None)
        assert isinstance(error, InvalidArgumentError)
        message = str(error)
        assert "bad" in message
        assert "input" in message
        assert "PlainOrder" in message
        for supported in ("dataclass", "TypedDict", "msgspec.Struct", "dict[str, Any]"):
            assert supported in message, message

    def test_plain_class_output_is_refused(self) -> None:
        error = _refused(JobTypes(), input=None, output=PlainOrder)
        assert "output" in str(error)
        assert "PlainOrder" in str(error)

    def test_plain_class_nested_in_a_dataclass_is_refused_naming_the_field(self) -> None:
        error = _refused(JobTypes(), input=Envelope, output=None)
        assert "PlainOrder" in str(error), str(error)
        assert "$.order" in str(error), str(error)

    def test_plain_class_in_a_container_is_refused(self) -> None:
        error = _refused(JobTypes(), input=list[PlainOrder], output=None)
        assert "PlainOrder" in str(error), str(error)
        assert "$[...]" in str(error), str(error)

    def test_pydantic_v1_model_is_refused_with_the_upgrade_hint(self) -> None:
        import pydantic.v1

        class Signup(pydantic.v1.BaseModel):
            email: str

        error = _refused(JobTypes(), input=Signup, output=None)
        message = str(error)
        assert "Signup" in message, message
        assert "pydantic v1 model" in message, message
        assert "supports pydantic v2 models" in message, message


class TestStillAccepted:
    @pytest.mark.parametrize(
        "declared",
        [
            Order,
            Row,
            Item,
            Colour,
            Literal["a", "b"],
            list[Order],
            dict[str, Any],
            dict,
            Any,
            int | None,
            datetime,
            uuid.UUID,
            Decimal,
            tuple[int, str],
            str,
        ],
    )
    def test_supported_types_still_define(self, declared: Any) -> None:
        types = JobTypes()
        types.define("ok", input=declared, output=declared)
        assert "ok" in types
