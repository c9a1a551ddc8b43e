"""Worker events as log lines: debug detail, warnings for failures (rate limited under a storm)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any


def event_level(event_name: str) -> int:
    """The log level of a worker event: failures warn, the rest is debug detail."""
    return logging.WARNING if event_name.endswith(("failed", "error")) else logging.DEBUG


class EventLog:
    """Writes worker events to ``logger``."""

    def __init__(self, logger: logging.Logger) -> None:
        self._log = logger

    def enabled_for(self, name: str) -> bool:
        """Whether an event of this name would be written (skip building it otherwise)."""
        return self._log.isEnabledFor(event_level(name))

    def log(self, name: str, attributes: Mapping[str, Any]) -> None:
        """Write one event."""
        level = event_level(name)
        if self._log.isEnabledFor(level):
            self._log.log(
                level, "%s %s", name, " ".join(f"{key}={value}" for key, value in attributes.items())
            )
