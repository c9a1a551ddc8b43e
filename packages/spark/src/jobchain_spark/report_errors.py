"""Top errors: stored errors grouped by exception type and message, not by their first line.

The worker stores an error as Python prints it (``traceback.format_exception``, cut at
10,000 characters with a ``…(truncated)`` line), so the first line of nearly every stored
error is ``Traceback (most recent call last):``. :func:`error_signature` finds the line that
names the exception that was finally raised instead:

- a plain message (``released: the worker shut down …``) is its first non-empty line, with
  no type;
- a traceback gives its exception line (``ValueError: bad input``); a message spanning
  several lines, and notes added to the exception, keep their first line only;
- chained exceptions (``raise … from …``, or raised while handling another) give the last
  one, the exception that reached the worker;
- an exception group gives the group's own line (``ExceptionGroup: eg (2 sub-exceptions)``);
- a traceback truncated before its exception line says so.

What is counted: every failed attempt kept in a job's error history (``attempt_errors``, the
last 10 per job, kept when a later attempt succeeds), grouped by its exception type and the
first line of its message; abandoned attempts (``AttemptAbandoned``: the worker died or its
lease expired) count too, failures caused by a blocker chain do not (they are not attempts:
see the ``blocker_failures`` table). A job without a history (its rows predate the history,
or its failures were recorded without one) counts as before: by the error of its last
attempt, when it is not completed, one row per job.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

TOP_ERRORS: Final = 10
MAX_MESSAGE: Final = 200
ERRORS_NOTE: Final = (
    "Top errors count failed attempts from each job's error history (its last 10 failed or "
    "abandoned attempts, kept when a later attempt succeeds). Jobs without a history (recorded "
    "before jobchain kept one) count by the error of their last attempt, when not completed."
)
NOT_ATTEMPTS: Final = ("BlockerChainFailed", "BlockerChainCancelled")
"""History entries that record a blocker chain's failure, not a failed attempt of the job."""

_HEADER: Final = "Traceback (most recent call last):"
_GROUP_HEADER: Final = "+ Exception Group Traceback (most recent call last):"
_CHAIN_SEPARATORS: Final = (
    "The above exception was the direct cause of the following exception:",
    "During handling of the above exception, another exception occurred:",
)
_TRUNCATED: Final = "…(truncated)"
_TYPE_LINE: Final = re.compile(r"([A-Za-z_][\w.]*)(?::\s?(.*))?")
_GROUP_PREFIX: Final = re.compile(r"^\s*\| ?")


def _cut(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= MAX_MESSAGE else text[: MAX_MESSAGE - 1] + "…"


def _exception_line(line: str) -> tuple[str, str]:
    """(type, ``Type: message``) of an exception line such as ``ValueError: bad input``."""
    match = _TYPE_LINE.fullmatch(line.strip())
    if match is None:  # not ``Name: …`` (e.g. a SyntaxError's caret): keep the text as it is
        return "", _cut(line)
    return match.group(1), _cut(line.strip())


def _last_block(lines: list[str]) -> list[str]:
    """The lines of the last exception of a chain (after the last top-level separator)."""
    starts = [
        i + 1 for i, line in enumerate(lines) if line.strip() in _CHAIN_SEPARATORS and not line[:1].isspace()
    ]
    return lines[starts[-1] :] if starts else lines


def error_signature(text: str | None) -> tuple[str, str]:
    """(error type, error) of one stored error: ``("ValueError", "ValueError: bad input")``.

    The type is ``""`` for a plain message; see the module docstring for every form.
    """
    if text is None or not text.strip():
        return "", ""
    lines = text.strip().splitlines()
    truncated = lines[-1].strip() == _TRUNCATED
    if truncated:
        lines = lines[:-1]
    kind, error = _signature(lines)
    if truncated and kind:
        # The cut may have removed later chained exceptions: this one may be only a cause.
        return kind, _cut(error + " (truncated traceback)")
    return kind, error


def _signature(lines: list[str]) -> tuple[str, str]:
    last = _last_block(lines)
    chained = last is not lines
    block = [line for line in last if line.strip()]
    if not block:
        return "", "(empty error)"
    head = block[0].strip()
    if head == _HEADER:
        for line in block[1:]:
            if not line[:1].isspace():  # frames and source lines are indented; the exception is not
                return _exception_line(line)
    elif head == _GROUP_HEADER:
        for line in block[1:]:
            inner = _GROUP_PREFIX.sub("", line, count=1)
            if line.lstrip().startswith("|") and inner and not inner[:1].isspace():
                return _exception_line(inner)
    elif not chained:
        return "", _cut(head)  # a plain message: its first line
    else:
        return _exception_line(head)  # a chained exception printed without a traceback
    return "", "(traceback truncated before its exception line)"


def entry_signature(error_type: str | None, message: str | None) -> tuple[str, str]:
    """(error type, error) of one history entry: ``("ValueError", "ValueError: bad input")``."""
    kind = error_type or ""
    first = next((line.strip() for line in (message or "").splitlines() if line.strip()), "")
    if not kind:
        return "", _cut(first) if first else "(empty error)"
    return kind, _cut(f"{kind}: {first}" if first else kind)


def _udf(fn: Callable[..., Any]) -> Any:
    from pyspark.sql import functions as sf
    from pyspark.sql.types import StringType, StructField, StructType

    schema = StructType([StructField("error_type", StringType()), StructField("error", StringType())])
    with warnings.catch_warnings():
        # PySpark reads the type hints to look for a pandas UDF and warns that these (plain str)
        # are not one; a plain row-at-a-time UDF is what is meant.
        warnings.simplefilter("ignore", UserWarning)
        return sf.udf(fn, schema)


def signature_udf() -> Any:
    """:func:`error_signature` as a Spark UDF returning ``struct<error_type, error>``."""
    return _udf(error_signature)


def top_errors(jobs: DataFrame, limit: int = TOP_ERRORS) -> DataFrame:
    """Failed attempts per (job type, error type, error), most frequent first, ``limit`` rows.

    Columns: ``type_name``, ``error_type``, ``error``, ``jobs`` (jobs with such a failure),
    ``attempts`` (failed attempts with it, from the histories; for a job without a history,
    the attempts it has made so far, the last one failing with it), ``last_seen_at``.
    Identical texts are grouped in Spark first, so the parser runs once per distinct text.
    """
    from pyspark.sql import functions as sf

    from jobchain_spark.report_lifecycle import history

    entries = history()
    has_history = sf.coalesce(sf.size(entries) > 0, sf.lit(False))
    kept = (
        jobs.where(has_history)
        .select("type_name", "id", sf.explode(entries).alias("e"))
        .where(~sf.col("e.error_type").isin(*NOT_ATTEMPTS))
        .groupBy("type_name", sf.col("e.error_type").alias("kind"), sf.col("e.message").alias("message"))
        .agg(
            sf.count_distinct("id").alias("jobs"),
            sf.count(sf.lit(1)).alias("attempts"),
            sf.max("e.at").alias("last_seen_at"),
        )
        .withColumn("signature", _udf(entry_signature)(sf.col("kind"), sf.col("message")))
        .drop("kind", "message")
    )
    legacy = (
        jobs.where(
            ~has_history & sf.col("last_attempt_error").isNotNull() & (sf.col("status") != "completed")
        )
        .groupBy("type_name", "last_attempt_error")
        .agg(
            sf.count(sf.lit(1)).alias("jobs"),
            sf.sum(sf.col("attempt").cast("long")).alias("attempts"),
            sf.max("last_attempt_at").alias("last_seen_at"),
        )
        .withColumn("signature", signature_udf()(sf.col("last_attempt_error")))
        .drop("last_attempt_error")
    )
    # A job is in one of the two sources only, so the sums count each job once.
    return (
        kept.unionByName(legacy)
        .groupBy(
            "type_name",
            sf.col("signature.error_type").alias("error_type"),
            sf.col("signature.error").alias("error"),
        )
        .agg(
            sf.sum("jobs").alias("jobs"),
            sf.sum("attempts").alias("attempts"),
            sf.max("last_seen_at").alias("last_seen_at"),
        )
        .orderBy(sf.desc("jobs"), sf.desc("attempts"), "type_name", "error")
        .limit(limit)
    )


__all__ = [
    "ERRORS_NOTE",
    "NOT_ATTEMPTS",
    "TOP_ERRORS",
    "entry_signature",
    "error_signature",
    "signature_udf",
    "top_errors",
]
