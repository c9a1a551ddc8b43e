"""Parse durations such as ``30d``, ``12h``, ``90m``, ``45s``, ``2w`` (CLI and Spark options)."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Final

from jobchain_spark.errors import SparkOptionError

_UNITS: Final = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_PATTERN: Final = re.compile(r"(\d+(?:\.\d+)?)([smhdw])")


def parse_duration(option: str, text: str) -> timedelta:
    """``text`` as a positive timedelta; SparkOptionError names ``option`` otherwise."""
    match = _PATTERN.fullmatch(text.strip().lower()) if isinstance(text, str) else None
    if match is None:
        raise SparkOptionError(option, f"expected a duration such as 30d, 12h, 90m or 45s, got {text!r}")
    value = timedelta(seconds=float(match.group(1)) * _UNITS[match.group(2)])
    if value <= timedelta(0):
        raise SparkOptionError(option, f"must be positive, got {text!r}")
    return value


__all__ = ["parse_duration"]
