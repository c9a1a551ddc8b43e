"""Which DataFrame columns a job type's input needs, and whether their Spark types fit.

The declared input type (a dataclass, TypedDict or msgspec Struct) is inspected with
``msgspec.inspect``: each field becomes a column of the same name. Fields with a default
may be absent; a null in such a column means "use the default".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgspec.inspect as mi
from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegralType,
    MapType,
    StringType,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from jobchain.job_types import JobType
from jobchain_spark.errors import ColumnTypeError, MissingColumnError, SparkOptionError

_RECORDS = (mi.DataclassType, mi.TypedDictType, mi.StructType)


@dataclass(frozen=True, slots=True)
class InputField:
    name: str
    required: bool
    type: mi.Type


def input_fields(job_type: JobType[Any, Any]) -> tuple[InputField, ...] | None:
    """The record fields of the job type's input, or None when the input is not a record."""
    info = mi.type_info(job_type.input_type)
    if not isinstance(info, _RECORDS):
        return None
    return tuple(InputField(f.encode_name, f.required, f.type) for f in info.fields)


def _accepts(declared: mi.Type, actual: DataType) -> tuple[bool, str]:
    """Whether a column of ``actual`` type can hold values of ``declared``, and what is expected."""
    if isinstance(declared, mi.UnionType):
        options = [t for t in declared.types if not isinstance(t, mi.NoneType)]
        results = [_accepts(t, actual) for t in options]
        return any(ok for ok, _ in results), " or ".join(e for _, e in results)
    checks: list[tuple[type[mi.Type], tuple[type[DataType], ...], str]] = [
        (mi.StrType, (StringType,), "string"),
        (mi.BoolType, (BooleanType,), "boolean"),
        (mi.IntType, (IntegralType,), "an integer type"),
        (mi.FloatType, (IntegralType, FloatType, DoubleType), "a numeric type (cast decimals to double)"),
        (mi.DateTimeType, (TimestampType, TimestampNTZType, StringType), "timestamp"),
        (mi.DateType, (DateType, StringType), "date"),
        (mi.ListType, (ArrayType,), "array"),
        (mi.DictType, (MapType, StructType), "map or struct"),
        (mi.DataclassType, (StructType,), "struct"),
        (mi.TypedDictType, (StructType,), "struct"),
        (mi.StructType, (StructType,), "struct"),
    ]
    for info_type, spark_types, expected in checks:
        if isinstance(declared, info_type):
            return isinstance(actual, spark_types) and not isinstance(actual, DecimalType), expected
    return True, "any"  # Any, enums, literals...: the per-row validation decides


def check_input_columns(
    job_type: JobType[Any, Any], schema: StructType, input_column: str | None, ignore: tuple[str, ...] = ()
) -> tuple[str, ...]:
    """Check ``schema`` against the job type's input; return the columns forming each row's input.

    With ``input_column`` the whole input comes from that one column (JSON text or a struct).
    Raises MissingColumnError or ColumnTypeError naming the column, or SparkOptionError.
    """
    columns = {f.name: f.dataType for f in schema.fields}
    if input_column is not None:
        if input_column not in columns:
            raise MissingColumnError(input_column, f"not in the DataFrame (columns: {', '.join(columns)})")
        if not isinstance(columns[input_column], (StringType, StructType, MapType)):
            raise ColumnTypeError(
                input_column,
                f"holds {columns[input_column].simpleString()}; the input column must be JSON text "
                "(string) or a struct",
            )
        return (input_column,)
    fields = input_fields(job_type)
    if fields is None:
        raise SparkOptionError(
            "input_column",
            f"job type {job_type.name!r} takes a non-record input; name the column holding it "
            "(JSON text or a struct) with input_column",
        )
    for f in fields:
        if f.name in ignore:
            continue
        if f.name not in columns:
            if f.required:
                raise MissingColumnError(
                    f.name,
                    f"job type {job_type.name!r} needs it as input; the DataFrame has {', '.join(columns)}",
                )
            continue
        ok, expected = _accepts(f.type, columns[f.name])
        if not ok:
            raise ColumnTypeError(
                f.name,
                f"holds {columns[f.name].simpleString()}, but job type {job_type.name!r} declares "
                f"{expected}; cast the column",
            )
    return tuple(f.name for f in fields if f.name in columns)


__all__ = ["InputField", "check_input_columns", "input_fields"]
