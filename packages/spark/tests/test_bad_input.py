"""Bad input to bulk start and the CLI: typed errors naming the column or option, nothing written."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import sparkkit
from click.testing import CliRunner

from jobchain.errors import UnknownJobTypeError
from jobchain_spark import (
    BackendNotInstalledError,
    ColumnTypeError,
    DuplicateKeyError,
    MissingColumnError,
    NullKeyError,
    RowValidationError,
    SparkOptionError,
    start_chains,
)
from jobchain_spark.cli import main

# Only the tests that use the session carry the spark marker (its xdist group): the others
# need no JVM and run on any worker.
pytestmark = pytest.mark.timeout(900)


def _start(df: Any, url: str, **options: Any) -> Any:
    options.setdefault("key", "order_id")
    return start_chains(df, url=url, job_type="send_email", job_types=sparkkit.types, **options)


def _nothing_written(url: str) -> bool:
    return asyncio.run(sparkkit.count_chains(url, "send_email")) == {}


@pytest.mark.spark
def test_schema_problems_name_the_column(spark: Any, sqlite_url: str) -> None:
    missing = spark.createDataFrame([("k1", "a@b")], "order_id string, to string")
    with pytest.raises(MissingColumnError, match="'subject'"):
        _start(missing, sqlite_url)
    wrong = spark.createDataFrame([("k1", "a@b", 5)], "order_id string, to string, subject int")
    with pytest.raises(ColumnTypeError, match=r"'subject'.*string"):
        _start(wrong, sqlite_url)
    good = spark.createDataFrame([("k1", "a@b", "s")], "order_id string, to string, subject string")
    with pytest.raises(MissingColumnError, match="'id'"):
        _start(good, sqlite_url, key="id")
    with pytest.raises(BackendNotInstalledError, match="'url'"):
        _start(good, "nosuch://db")
    with pytest.raises(UnknownJobTypeError):
        start_chains(good, url=sqlite_url, job_type="nope", job_types=sparkkit.types)
    with pytest.raises(SparkOptionError, match="'job_types'"):
        start_chains(good, url=sqlite_url, job_type="send_email", job_types="no_such_module:types")
    assert _nothing_written(sqlite_url)


@pytest.mark.spark
def test_key_and_row_problems_write_nothing(spark: Any, sqlite_url: str) -> None:
    schema = "order_id string, to string, subject string"
    nulls = spark.createDataFrame([("k1", "a", "s"), (None, "b", "s")], schema)
    with pytest.raises(NullKeyError, match="'order_id'"):
        _start(nulls, sqlite_url)
    dups = spark.createDataFrame([("k1", "a", "s"), ("k1", "b", "s"), ("k2", "c", "s")], schema)
    with pytest.raises(DuplicateKeyError, match="'k1'"):
        _start(dups, sqlite_url)
    invalid = spark.createDataFrame([("k1", "a", "s"), ("k2", None, "s")], schema)
    with pytest.raises(RowValidationError, match=r"'k2'.*to"):
        _start(invalid, sqlite_url)
    assert _nothing_written(sqlite_url)
    result = _start(invalid, sqlite_url, on_invalid="reject")
    assert (result.started, result.rejected) == (1, 1)
    assert [r["key"] for r in result.rejects.collect()] == ["k2"]


def test_cli_bad_input_exits_with_a_typed_message() -> None:
    runner = CliRunner()
    out = runner.invoke(
        main, ["archive", "--url", "sqlite:///x.db", "--older-than", "soon", "--to", "/tmp/x"]
    )
    assert out.exit_code == 2
    assert "option 'older-than'" in out.output
