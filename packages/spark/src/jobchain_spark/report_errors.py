"""Top errors: stored errors grouped by a fingerprint of their type and message.

Errors that differ only in the values they carry (an order ref, a job id, a number, a quoted
value) share one fingerprint (:func:`jobchain.error_fingerprint.error_fingerprint`):
``CardExpired: card for order <id> expired on <n>``. :func:`fingerprint_column` computes it
with Spark SQL functions (``regexp_replace`` with the same rules), so it runs in the
executors, and gives the same text as the Python function (a test checks both on a table of
examples). Each group keeps one real message as its ``example`` and counts its distinct
``messages``.

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
fingerprint of the first line of its message; abandoned attempts (``AttemptAbandoned``: the
worker died or its lease expired) count too, failures caused by a blocker chain do not (they
are not attempts: see the ``blocker_failures`` table). A job without a history (its rows
predate the history, or its failures were recorded without one) counts as before: by the
error of its last attempt (its :func:`error_signature`, then fingerprinted), when it is not
completed, one row per job.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

from jobchain.error_fingerprint import EMPTY, FIRST_LINE, MAX_FINGERPRINT, RULES, WHITESPACE

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

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


def _joined(kind: Column, line: Column) -> Column:
    """``kind: line``, ``kind`` or ``line`` alone, or ``(empty error)``; cut as :func:`cut`."""
    from pyspark.sql import functions as sf

    joined = (
        sf.when((kind != "") & (line != ""), sf.concat(kind, sf.lit(": "), line))
        .when(kind != "", kind)
        .when(line != "", line)
        .otherwise(sf.lit(EMPTY))
    )
    cut_at = MAX_FINGERPRINT - 1
    return sf.when(
        sf.length(joined) > MAX_FINGERPRINT, sf.concat(sf.substring(joined, 1, cut_at), sf.lit("…"))
    ).otherwise(joined)


def _first_line(message: Column) -> Column:
    """:func:`jobchain.error_fingerprint.first_line` in Spark SQL."""
    from pyspark.sql import functions as sf

    line = sf.regexp_extract(sf.coalesce(message, sf.lit("")), FIRST_LINE, 1)
    return sf.trim(sf.regexp_replace(line, WHITESPACE, " "))  # trim: spaces, all that is left


def fingerprint_column(error_type: Column, message: Column) -> Column:
    """:func:`jobchain.error_fingerprint.error_fingerprint` with Spark SQL functions (no UDF).

    The same rules (:data:`jobchain.error_fingerprint.RULES`, written to mean the same in
    Python and Java regular expressions), applied with ``regexp_replace`` in order.
    """
    from pyspark.sql import functions as sf

    masked = _first_line(message)
    for pattern, replacement in RULES:
        masked = sf.regexp_replace(masked, pattern, replacement)
    return _joined(sf.coalesce(error_type, sf.lit("")), masked)


def example_column(error_type: Column, message: Column) -> Column:
    """:func:`jobchain.error_fingerprint.error_line` (``Type: first line``) in Spark SQL."""
    from pyspark.sql import functions as sf

    return _joined(sf.coalesce(error_type, sf.lit("")), _first_line(message))


def _message_of(kind: Column, error: Column) -> Column:
    """The message part of a signature's ``error`` (``ValueError: bad`` → ``bad``)."""
    from pyspark.sql import functions as sf

    return (
        sf.when(kind == "", error)
        .when(
            sf.startswith(error, sf.concat(kind, sf.lit(": "))),
            sf.substring(error, sf.length(kind) + 3, sf.length(error)),
        )
        .otherwise(sf.lit(""))  # the type alone (``StopIteration``)
    )


def top_errors(jobs: DataFrame, limit: int = TOP_ERRORS) -> DataFrame:
    """Failed attempts per (job type, error type, fingerprint), most frequent first, ``limit`` rows.

    Columns: ``type_name``, ``error_type``, ``fingerprint`` (the group: the error with its
    values masked), ``example`` (one real error of the group, ``Type: first line``: the
    latest), ``messages`` (distinct such errors in the group), ``jobs`` (jobs with such a
    failure), ``attempts`` (failed attempts with it, from the histories; for a job without a
    history, the attempts it has made so far, the last one failing with it), ``last_seen_at``.
    The fingerprints of history entries are computed in the executors (Spark SQL); a job
    without a history has its stored error parsed by :func:`error_signature` once per
    distinct text.
    """
    from pyspark.sql import functions as sf

    from jobchain_spark.report_lifecycle import history

    entries = history()
    has_history = sf.coalesce(sf.size(entries) > 0, sf.lit(False))
    kept = (
        jobs.where(has_history)
        .select("type_name", "id", sf.explode(entries).alias("e"))
        .where(~sf.col("e.error_type").isin(*NOT_ATTEMPTS))
        .select(
            "type_name",
            "id",
            sf.coalesce(sf.col("e.error_type"), sf.lit("")).alias("error_type"),
            fingerprint_column(sf.col("e.error_type"), sf.col("e.message")).alias("fingerprint"),
            example_column(sf.col("e.error_type"), sf.col("e.message")).alias("example"),
            sf.lit(1).cast("long").alias("attempts"),
            sf.col("e.at").alias("at"),
        )
    )
    legacy = jobs.where(
        ~has_history & sf.col("last_attempt_error").isNotNull() & (sf.col("status") != "completed")
    )
    texts = (
        legacy.select("last_attempt_error")
        .distinct()
        .withColumn("signature", signature_udf()(sf.col("last_attempt_error")))
        .select(
            "last_attempt_error",
            sf.col("signature.error_type").alias("__kind"),
            sf.col("signature.error").alias("__error"),
        )
    )
    parsed = (
        legacy.select("type_name", "id", "last_attempt_error", "attempt", "last_attempt_at")
        .join(texts, "last_attempt_error")
        .select(
            "type_name",
            "id",
            sf.col("__kind").alias("error_type"),
            fingerprint_column(sf.col("__kind"), _message_of(sf.col("__kind"), sf.col("__error"))).alias(
                "fingerprint"
            ),
            sf.col("__error").alias("example"),
            sf.col("attempt").cast("long").alias("attempts"),
            sf.col("last_attempt_at").alias("at"),
        )
    )
    # A job is in one of the two sources only: distinct ids count each job once.
    return (
        kept.unionByName(parsed)
        .groupBy("type_name", "error_type", "fingerprint")
        .agg(
            sf.max_by("example", sf.struct("at", "example")).alias("example"),
            sf.count_distinct("example").alias("messages"),
            sf.count_distinct("id").alias("jobs"),
            sf.sum("attempts").alias("attempts"),
            sf.max("at").alias("last_seen_at"),
        )
        .orderBy(sf.desc("jobs"), sf.desc("attempts"), "type_name", "fingerprint")
        .limit(limit)
    )


__all__ = [
    "ERRORS_NOTE",
    "example_column",
    "fingerprint_column",
    "NOT_ATTEMPTS",
    "TOP_ERRORS",
    "entry_signature",
    "error_signature",
    "signature_udf",
    "top_errors",
]
