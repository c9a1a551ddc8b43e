"""The job-type registry: declarations, slices, validation at the JSON boundary."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypedDict

import msgspec
import pytest

from jobchain.errors import (
    DuplicateJobTypeError,
    InvalidArgumentError,
    JobTypeValidationError,
    UnknownJobTypeError,
)
from jobchain.job_types import JobType, JobTypes
from jobchain.json_values import from_json_value, to_json_value


@dataclass
class Order:
    order_id: str
    count: int
    placed_at: datetime | None = None


@dataclass
class Receipt:
    total: float


class Ping(TypedDict):
    n: int


class Point(msgspec.Struct):
    x: int
    y: int


class TestDefine:
    def test_define_returns_a_typed_job_type_with_its_rules(self) -> None:
        types = JobTypes()
        jt = types.define("orders.place", input=Order, output=Receipt, entry=True, continues_with=["x"])
        assert isinstance(jt, JobType)
        assert (jt.name, jt.input_type, jt.output_type, jt.entry) == ("orders.place", Order, Receipt, True)
        assert jt.continues_with == frozenset({"x"})
        assert jt.blockers is None
        assert types.get("orders.place") is jt
        assert types.names() == ["orders.place"]

    def test_define_accepts_job_types_as_rule_targets(self) -> None:
        types = JobTypes()
        step = types.define("step", input=int, output=int)
        first = types.define("first", input=int, output=None, continues_with=[step], blockers=[step])
        assert first.continues_with == frozenset({"step"})
        assert first.blockers == frozenset({"step"})

    def test_duplicate_name_in_one_slice_is_an_error(self) -> None:
        types = JobTypes()
        types.define("a", input=int, output=int)
        with pytest.raises(DuplicateJobTypeError, match="declared twice: a"):
            types.define("a", input=str, output=str)

    @pytest.mark.parametrize("name", ["", "has space", "x" * 201, "emoji🙂", "a/b"])
    def test_invalid_type_names_are_rejected(self, name: str) -> None:
        with pytest.raises(InvalidArgumentError, match="job type name"):
            JobTypes().define(name, input=int, output=int)

    def test_type_names_allow_dots_colons_dashes_underscores(self) -> None:
        jt = JobTypes().define("billing:invoice.send-v2_x", input=int, output=int)
        assert jt.name == "billing:invoice.send-v2_x"

    def test_unusable_declared_type_is_rejected_at_definition(self) -> None:
        with pytest.raises(InvalidArgumentError, match="cannot be used as a job input"):
            JobTypes().define("bad", input=object(), output=None)  # type: ignore[call-overload]

    def test_rule_lists_must_not_be_a_plain_string(self) -> None:
        with pytest.raises(InvalidArgumentError, match="collection of type names"):
            JobTypes().define("a", input=int, output=int, continues_with="b")


class TestMerge:
    def test_merge_combines_slices(self) -> None:
        left, right = JobTypes(), JobTypes()
        a = left.define("a", input=int, output=int)
        b = right.define("b", input=str, output=str)
        merged = JobTypes.merge(left, right)
        assert merged.get("a") is a
        assert merged.get("b") is b
        assert sorted(merged.names()) == ["a", "b"]
        assert len(merged) == 2
        assert "a" in merged
        assert len(left) == 1  # slices are not modified

    def test_merge_rejects_a_name_declared_in_two_slices(self) -> None:
        left, right = JobTypes(), JobTypes()
        left.define("dup", input=int, output=int)
        left.define("other", input=int, output=int)
        right.define("dup", input=int, output=int)
        with pytest.raises(DuplicateJobTypeError) as info:
            JobTypes.merge(left, right)
        assert info.value.type_names == ("dup",)
        assert "dup" in str(info.value)

    def test_merging_the_same_slice_twice_is_not_a_duplicate(self) -> None:
        part = JobTypes()
        part.define("a", input=int, output=int)
        merged = JobTypes.merge(part, JobTypes.merge(part))
        assert merged.names() == ["a"]

    def test_unknown_type_error_names_the_registered_types(self) -> None:
        types = JobTypes()
        types.define("known", input=int, output=int)
        with pytest.raises(UnknownJobTypeError) as info:
            types.get("nope")
        assert info.value.type_name == "nope"
        assert info.value.registered_type_names == ("known",)
        assert "known" in str(info.value)

    def test_resolve_rejects_a_same_named_type_from_another_registry(self) -> None:
        mine, theirs = JobTypes(), JobTypes()
        mine.define("a", input=int, output=int)
        foreign = theirs.define("a", input=int, output=int)
        with pytest.raises(InvalidArgumentError, match="not the one registered"):
            mine.resolve(foreign)


class TestValidation:
    def test_input_round_trips_through_json(self) -> None:
        jt = JobTypes().define("o", input=Order, output=Receipt)
        when = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
        stored = jt.encode_input(Order("o-1", 3, when))
        assert stored == {"order_id": "o-1", "count": 3, "placed_at": "2024-05-01T12:00:00Z"}
        assert jt.decode_input(stored) == Order("o-1", 3, when)

    def test_wrong_field_type_names_type_and_field(self) -> None:
        jt = JobTypes().define("orders.place", input=Order, output=Receipt)
        with pytest.raises(JobTypeValidationError) as info:
            jt.encode_input(Order("o-1", "three"))  # type: ignore[arg-type]
        err = info.value
        assert err.code == "invalid_input"
        assert err.type_name == "orders.place"
        assert "$.count" in err.details
        assert "orders.place" in str(err)
        assert "$.count" in str(err)

    def test_missing_field_is_reported(self) -> None:
        jt = JobTypes().define("p", input=Ping, output=None)
        with pytest.raises(JobTypeValidationError, match="missing required field `n`"):
            jt.encode_input({})  # type: ignore[typeddict-item]

    def test_output_is_validated_with_its_own_code(self) -> None:
        jt = JobTypes().define("o", input=Order, output=Receipt)
        with pytest.raises(JobTypeValidationError) as info:
            jt.encode_output({"total": "lots"})  # type: ignore[arg-type]
        assert info.value.code == "invalid_output"
        assert "$.total" in info.value.details

    def test_none_output_accepts_only_none(self) -> None:
        jt = JobTypes().define("n", input=int, output=None)
        assert jt.encode_output(None) is None
        with pytest.raises(JobTypeValidationError, match="invalid_output"):
            jt.encode_output(1)  # type: ignore[arg-type]

    def test_struct_typeddict_and_primitive_types_work(self) -> None:
        types = JobTypes()
        s = types.define("s", input=Point, output=int)
        t = types.define("t", input=Ping, output=str)
        d = types.define("d", input=dict[str, Any], output=list[int])
        assert s.decode_input(s.encode_input(Point(1, 2))) == Point(1, 2)
        assert t.encode_input({"n": 1}) == {"n": 1}
        assert d.encode_input({"a": [1, {"b": None}]}) == {"a": [1, {"b": None}]}
        assert d.decode_output(d.encode_output([1, 2])) == [1, 2]

    def test_decoding_a_stored_value_of_the_wrong_shape_names_the_field(self) -> None:
        jt = JobTypes().define("o", input=Order, output=Receipt)
        with pytest.raises(JobTypeValidationError, match=r"\$\.order_id"):
            jt.decode_input({"order_id": 1, "count": 1})

    @pytest.mark.parametrize(
        ("value", "where"),
        [
            ({"a": float("nan")}, "$.a"),
            ({"a": [1, math.inf]}, "$.a[1]"),
            ({"a": -math.inf}, "$.a"),
            ({"a": {1, 2}}, "$.a"),
            ({"a": b"raw"}, "$.a"),
            ({"a": object()}, "object"),
        ],
    )
    def test_non_json_values_are_rejected_anywhere(self, value: dict[str, Any], where: str) -> None:
        jt = JobTypes().define("any", input=dict[str, Any], output=None)
        with pytest.raises(JobTypeValidationError) as info:
            jt.encode_input(value)
        assert info.value.code == "invalid_input"
        assert "not JSON-serializable" in info.value.details
        assert where in info.value.details

    def test_nan_inside_a_dataclass_field_is_rejected(self) -> None:
        jt = JobTypes().define("r", input=Receipt, output=None)
        with pytest.raises(JobTypeValidationError, match=r"not JSON-serializable.*\$\.total"):
            jt.encode_input(Receipt(float("nan")))

    def test_oversized_payload_is_rejected(self) -> None:
        jt = JobTypes().define("big", input=str, output=None, max_payload_bytes=100)
        assert jt.encode_input("x" * 10) == "x" * 10
        with pytest.raises(JobTypeValidationError, match="100-byte limit"):
            jt.encode_input("x" * 200)

    def test_to_json_value_without_a_type_only_checks_json(self) -> None:
        assert to_json_value({"a": (1, 2)}) == {"a": [1, 2]}
        assert from_json_value({"a": 1}, Any) == {"a": 1}


class TestRules:
    def setup_method(self) -> None:
        self.types = JobTypes()
        self.step = self.types.define("step", input=int, output=int)
        self.other = self.types.define("other", input=int, output=int)
        self.free = self.types.define("free", input=int, output=int, entry=True)
        self.strict = self.types.define(
            "strict", input=int, output=int, entry=True, continues_with=["step"], blockers=["free"]
        )
        self.lonely = self.types.define("lonely", input=int, output=int, continues_with=[], blockers=[])

    def test_entry_check(self) -> None:
        self.types.check_entry(self.free)
        with pytest.raises(JobTypeValidationError) as info:
            self.types.check_entry(self.step)
        assert info.value.code == "not_entry_point"
        assert "entry=True" in str(info.value)

    def test_continuation_none_allows_any_registered_type(self) -> None:
        self.types.check_continuation(self.free, self.other)
        foreign = JobTypes().define("foreign", input=int, output=int)
        with pytest.raises(UnknownJobTypeError):
            self.types.check_continuation(self.free, foreign)

    def test_continuation_list_is_enforced(self) -> None:
        self.types.check_continuation(self.strict, self.step)
        with pytest.raises(JobTypeValidationError) as info:
            self.types.check_continuation(self.strict, self.other)
        assert info.value.code == "invalid_continuation"
        assert "'other'" in info.value.details
        assert "step" in info.value.details

    def test_empty_continuation_list_allows_none(self) -> None:
        with pytest.raises(JobTypeValidationError, match="must finish with an output"):
            self.types.check_continuation(self.lonely, self.step)

    def test_blocker_rules(self) -> None:
        self.types.check_blockers(self.free, ["step", "other"])
        self.types.check_blockers(self.strict, ["free", "free"])
        with pytest.raises(JobTypeValidationError) as info:
            self.types.check_blockers(self.strict, ["free", "step"])
        assert info.value.code == "invalid_blockers"
        assert "'step'" in info.value.details
        self.types.check_blockers(self.lonely, [])
        with pytest.raises(JobTypeValidationError, match="allowed blocker types: \\(none\\)"):
            self.types.check_blockers(self.lonely, ["free"])
