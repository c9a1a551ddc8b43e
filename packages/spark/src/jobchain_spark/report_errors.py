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

What is counted: the store keeps only the error of a job's *last* attempt, and a success
clears it. So the table covers jobs that are not completed (pending again after a failure,
or running a new attempt), one row per job, and errors of attempts that later succeeded are
not counted. An attempt-error history arrives with the job lifecycle issue.
"""

from __future__ import annotations

import re
import warnings
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

TOP_ERRORS: Final = 10
MAX_MESSAGE: Final = 200
ERRORS_NOTE: Final = (
    "Top errors count jobs by the error of their last attempt, as stored: jobs that are not "
    "completed (pending after a failure, or running again). Errors of attempts that later "
    "succeeded are not kept by this version of jobchain, so they are not counted."
)

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


def top_errors(jobs: DataFrame, limit: int = TOP_ERRORS) -> DataFrame:
    """Jobs per (job type, error type, error), most frequent first, ``limit`` rows.

    Columns: ``type_name``, ``error_type``, ``error``, ``jobs`` (jobs whose last attempt
    failed with it), ``attempts`` (attempts those jobs have made so far, the last one failing
    with it; earlier ones may have failed otherwise), ``last_seen_at`` (latest such failure).
    Identical texts are grouped in Spark first, so the parser runs once per distinct text.
    """
    from pyspark.sql import functions as sf
    from pyspark.sql.types import StringType, StructField, StructType

    schema = StructType([StructField("error_type", StringType()), StructField("error", StringType())])
    with warnings.catch_warnings():
        # PySpark reads the type hints to look for a pandas UDF and warns that these (plain str)
        # are not one; a plain row-at-a-time UDF is what is meant.
        warnings.simplefilter("ignore", UserWarning)
        parse = sf.udf(error_signature, schema)
    distinct = (
        jobs.where(sf.col("last_attempt_error").isNotNull() & (sf.col("status") != "completed"))
        .groupBy("type_name", "last_attempt_error")
        .agg(
            sf.count(sf.lit(1)).alias("jobs"),
            sf.sum(sf.col("attempt").cast("long")).alias("attempts"),
            sf.max("last_attempt_at").alias("last_seen_at"),
        )
    )
    return (
        distinct.withColumn("signature", parse(sf.col("last_attempt_error")))
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
        .orderBy(sf.desc("jobs"), "type_name", "error")
        .limit(limit)
    )


__all__ = ["ERRORS_NOTE", "TOP_ERRORS", "error_signature", "top_errors"]
