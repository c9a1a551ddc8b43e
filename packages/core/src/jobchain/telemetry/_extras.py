"""The optional libraries jobchain.telemetry builds on, and the one-line error naming their extra."""

from __future__ import annotations

import importlib.util

OTEL_EXTRA = "jobchain[otel]"
PROMETHEUS_EXTRA = "jobchain[prometheus]"


class MissingExtraError(ImportError):
    """An optional library of jobchain.telemetry is not installed; the message names the extra."""


def has_module(name: str) -> bool:
    """True if ``name`` can be imported (without importing it)."""
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def require(module: str, extra: str, what: str) -> None:
    """Raise MissingExtraError (one line, naming ``extra``) unless ``module`` is importable."""
    if not has_module(module):
        raise MissingExtraError(f"{what} needs {module!r}: pip install '{extra}'")
