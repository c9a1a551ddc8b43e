"""The report's ``period``: the time buckets of its per-period tables and charts.

A period is ``minute``, ``hour`` or ``day``, or a duration of whole minutes that divides a day
(``5m``, ``15m``, ``30m``, ``2h``, ``6h``): buckets then start at multiples of it since
midnight UTC (``15m``: 08:00, 08:15, 08:30 ...), so they line up with the clock and with the
hours and days. ``1m``, ``60m``, ``1h``, ``24h`` and ``1d`` are the named periods.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

import pandas as pd

from jobchain_spark.durations import parse_duration
from jobchain_spark.errors import SparkOptionError

if TYPE_CHECKING:
    from pyspark.sql import Column

NAMED: Final = {"minute": 60, "hour": 3600, "day": 86400}
"""The named periods and their length in seconds (``date_trunc`` units)."""
DAY: Final = 86400
_EXPECTED: Final = "minute, hour, day, or whole minutes that divide a day such as 5m, 15m or 2h"


@dataclass(frozen=True)
class Period:
    """One period: its canonical ``text`` (``hour``, ``15m``) and length in ``seconds``."""

    text: str
    seconds: int

    @property
    def named(self) -> bool:
        return self.text in NAMED

    @property
    def per(self) -> str:
        """After "per": ``hour``, ``15 minutes``, ``2 hours``."""
        if self.named:
            return self.text
        minutes = self.seconds // 60
        return f"{minutes // 60} hours" if minutes % 60 == 0 else f"{minutes} minutes"

    @property
    def noun(self) -> str:
        """A bucket, after "the": ``hour``, ``15-minute period``, ``2-hour period``."""
        if self.named:
            return self.text
        minutes = self.seconds // 60
        return f"{minutes // 60}-hour period" if minutes % 60 == 0 else f"{minutes}-minute period"

    @property
    def heading(self) -> str:
        """The heading of a table's period column: ``Hour``, ``Period (15 min)``."""
        if self.named:
            return self.text.capitalize()
        minutes = self.seconds // 60
        return f"Period ({minutes // 60} h)" if minutes % 60 == 0 else f"Period ({minutes} min)"

    @property
    def pattern(self) -> str:
        """``strftime`` pattern of a bucket's start: the day, or the day and the minute."""
        return "%Y-%m-%d" if self.seconds >= DAY else "%Y-%m-%d %H:%M"

    @property
    def step(self) -> pd.Timedelta:
        return pd.Timedelta(seconds=self.seconds)

    def start(self, column: str | Column) -> Column:
        """The start of the bucket ``column`` (a timestamp) falls in, as a timestamp."""
        from pyspark.sql import functions as sf

        if self.named:
            return sf.date_trunc(self.text, column)
        at = sf.col(column) if isinstance(column, str) else column
        # Whole seconds since the epoch, floored to a multiple of the period: midnight UTC is
        # a multiple of every period that divides a day.
        seconds = sf.unix_seconds(at)
        return sf.timestamp_seconds(seconds - sf.pmod(seconds, sf.lit(self.seconds)))


def parse_period(text: str) -> Period:
    """``text`` as a :class:`Period`; SparkOptionError (option ``period``) says what is accepted."""
    word = text.strip().lower() if isinstance(text, str) else ""
    if word in NAMED:
        return Period(word, NAMED[word])
    try:
        length = parse_duration("period", word)
    except SparkOptionError:
        raise SparkOptionError("period", f"must be {_EXPECTED}, got {text!r}") from None
    seconds = length.total_seconds()
    if not seconds.is_integer() or seconds % 60 or DAY % seconds:
        raise SparkOptionError("period", f"must be {_EXPECTED}, got {text!r}")
    whole = int(seconds)
    for name, size in NAMED.items():
        if whole == size:
            return Period(name, size)
    minutes = whole // 60
    return Period(f"{minutes // 60}h" if minutes % 60 == 0 else f"{minutes}m", whole)


__all__ = ["NAMED", "Period", "parse_period"]
