"""One-line summaries of the errors a ``jobchain-spark`` command can meet.

Errors reach the command line from three places: jobchain's own typed errors (their message
already says what to change), Spark and Py4J errors from the JVM (a Java stack trace, often
wrapping a Python traceback from a worker), and plain Python errors. Each becomes one line;
``--debug`` shows the whole trace instead.
"""

from __future__ import annotations

import re
from typing import Final

from jobchain.errors import JobchainError

MAX_LENGTH: Final = 500

_RAISED_IN_PYTHON: Final = re.compile(
    r"^\s*((?:jobchain\w*|psycopg|sqlite3|pyarrow)[\w.]*(?:Error|Exception|Warning)): (.+)$", re.MULTILINE
)
"""The last line of a Python traceback carried inside a Spark error, for our and drivers' errors."""

_QUALIFIED_NAME: Final = re.compile(r"^(?:[a-z_][\w$]*\.)+([A-Z][\w$]*)")


def _clip(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= MAX_LENGTH else text[: MAX_LENGTH - 1] + "…"


def _first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


def _java_lines(exc: BaseException) -> tuple[str, str] | None:
    """The first line of a Py4J error's Java exception and of its root cause, or None."""
    java = getattr(exc, "java_exception", None)
    if java is None:
        return None
    try:
        top = root = java
        for _ in range(20):  # the cause chain of a failed Spark job is a few links long
            cause = root.getCause()
            if cause is None:
                break
            root = cause
        return _first_line(str(top.toString())), _first_line(str(root.toString()))
    except Exception:  # the gateway may be gone by now; the Python text still says something
        return None


def one_line(exc: BaseException) -> str:
    """What went wrong, in one line of at most MAX_LENGTH characters."""
    if isinstance(exc, JobchainError):
        return _clip(str(exc))
    text = str(exc)
    raised = _RAISED_IN_PYTHON.findall(text)
    if raised:
        # A worker's error travels as text inside the Spark error; its last line is the cause.
        name, message = raised[-1]
        return _clip(f"{name.rsplit('.', 1)[-1]}: {message}")
    java = _java_lines(exc)
    if java is not None:
        top, root = (_QUALIFIED_NAME.sub(r"\1", line) for line in java)
        return _clip(top if root in ("", top) else f"{top} (cause: {root})")
    line = _first_line(text)
    if type(exc).__module__.startswith(("pyspark", "py4j")):
        return _clip(line or type(exc).__name__)  # Spark's messages start with their error class
    return _clip(f"{type(exc).__name__}: {line}" if line else type(exc).__name__)


def exit_code(exc: BaseException) -> int:
    """2 for a jobchain error (the input must change), 1 for anything else."""
    return 2 if isinstance(exc, JobchainError) else 1


__all__ = ["MAX_LENGTH", "exit_code", "one_line"]
