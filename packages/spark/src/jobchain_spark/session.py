"""A local Spark session for the command line, started with this interpreter's Python.

Spark starts its Python workers with ``PYSPARK_PYTHON`` (default: ``python3`` on the PATH),
which in a virtualenv is usually not the interpreter that has jobchain-spark installed: the
first read then fails in a worker with a Java stack trace. The helper points both variables
at ``sys.executable`` unless the user set them.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from importlib.resources import files
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

PYTHON_VARIABLES: Final = ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")


def use_this_python() -> dict[str, str]:
    """Set PYSPARK_PYTHON / PYSPARK_DRIVER_PYTHON to ``sys.executable`` where unset; returns what it set."""
    chosen: dict[str, str] = {}
    for name in PYTHON_VARIABLES:
        if not os.environ.get(name):
            os.environ[name] = chosen[name] = sys.executable
    return chosen


def local_session(
    master: str | None = None, *, app_name: str = "jobchain-spark", quiet: bool = False
) -> SparkSession:
    """The active Spark session, or a new one (``master``, default ``local[*]``) whose Python
    workers run with this interpreter. ``quiet`` silences Spark's own log and progress bar
    from the JVM's start on (the command line without ``--debug``); otherwise errors only."""
    from pyspark.sql import SparkSession

    use_this_python()
    builder = SparkSession.builder.appName(app_name)
    if master:
        builder = builder.master(master)
    level = "OFF" if quiet else "ERROR"
    if quiet:
        builder = builder.config("spark.ui.showConsoleProgress", "false")
    with _quiet_jvm_start() if quiet else nullcontext():
        session = builder.getOrCreate()
    session.sparkContext.setLogLevel(level)
    return session


@contextmanager
def _quiet_jvm_start() -> Iterator[None]:
    """A driver JVM started inside gets the quiet log4j2 configuration (an active one is kept).

    SPARK_SUBMIT_OPTS adds to the driver's Java options instead of replacing the user's
    ``spark.driver.extraJavaOptions``; it is restored once the JVM has started.
    """
    config = files("jobchain_spark") / "log4j2-quiet.properties"
    saved = os.environ.get("SPARK_SUBMIT_OPTS")
    os.environ["SPARK_SUBMIT_OPTS"] = f"{saved or ''} -Dlog4j2.configurationFile=file:{config}".strip()
    try:
        yield
    finally:
        if saved is None:
            del os.environ["SPARK_SUBMIT_OPTS"]
        else:
            os.environ["SPARK_SUBMIT_OPTS"] = saved


__all__ = ["PYTHON_VARIABLES", "local_session", "use_this_python"]
