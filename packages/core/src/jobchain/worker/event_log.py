"""Worker events as log lines: debug detail, warnings for failures, rate limited under a storm.

A retry storm (every job failing at hundreds per second) must not bury the one line an operator
needs. Each warning-level event name may write ``burst`` lines per ``window``; beyond that its
lines go to DEBUG only, and when the window ends one WARNING line summarizes what was held back,
counted by job type. Every event still reaches observers; only the log is limited.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

DEFAULT_BURST = 20
"""Warning lines per event name and window before the rest are summarized."""

DEFAULT_WINDOW = 10.0
"""Seconds per rate-limit window."""


def event_level(event_name: str) -> int:
    """The log level of a worker event: failures warn, the rest is debug detail."""
    return logging.WARNING if event_name.endswith(("failed", "error")) else logging.DEBUG


_UNSAFE = re.compile(r"[\x00-\x1f\x7f\ud800-\udfff]")
"""Control characters (a newline forges a log line) and lone surrogates (no encoding has them)."""


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def log_safe(value: object) -> str:
    """``str(value)`` with control characters and lone surrogates escaped (``\\x0a``, ``\\ud800``)."""
    text = str(value)
    return _UNSAFE.sub(_escape, text) if _UNSAFE.search(text) else text


def _line(name: str, attributes: Mapping[str, Any]) -> str:
    return f"{name} " + " ".join(f"{key}={log_safe(value)}" for key, value in attributes.items())


@dataclass(slots=True)
class _Window:
    started: float
    written: int = 0
    held_back: Counter[str] = field(default_factory=Counter)


class EventLog:
    """Writes worker events to ``logger``; warnings beyond ``burst`` per ``window`` are summarized."""

    def __init__(
        self,
        logger: logging.Logger,
        *,
        burst: int = DEFAULT_BURST,
        window: float = DEFAULT_WINDOW,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._log = logger
        self._burst = burst
        self._window = window
        self._clock = clock
        self._windows: dict[str, _Window] = {}
        self._summary_timer: asyncio.TimerHandle | None = None

    def enabled_for(self, name: str) -> bool:
        """Whether an event of this name would be written (skip building it otherwise)."""
        return self._log.isEnabledFor(event_level(name))

    def log(self, name: str, attributes: Mapping[str, Any]) -> None:
        """Write one event, or count it for the window's summary if its name is over budget."""
        level = event_level(name)
        if level < logging.WARNING:
            if self._log.isEnabledFor(level):
                self._log.log(level, "%s", _line(name, attributes))
            return
        now = self._clock()
        window = self._windows.get(name)
        if window is not None and now - window.started >= self._window:
            self._summarize(name, window)
            window = None
        if window is None:
            window = self._windows[name] = _Window(started=now)
        if window.written < self._burst:
            window.written += 1
            if self._log.isEnabledFor(level):
                self._log.log(level, "%s", _line(name, attributes))
            return
        window.held_back[str(attributes.get("job.type", "-"))] += 1
        if self._log.isEnabledFor(logging.DEBUG):
            self._log.debug("%s", _line(name, attributes))
        self._summarize_later()

    def flush(self) -> None:
        """Write the summary of every window that held lines back (at stop, or when due)."""
        self._summary_timer = None
        now = self._clock()
        for name, window in list(self._windows.items()):
            if window.held_back and now - window.started >= self._window:
                self._summarize(name, window)
                del self._windows[name]
        if any(window.held_back for window in self._windows.values()):
            self._summarize_later()

    def close(self) -> None:
        """Write every pending summary now, whether or not its window ended."""
        if self._summary_timer is not None:
            self._summary_timer.cancel()
            self._summary_timer = None
        for name, window in self._windows.items():
            self._summarize(name, window)
        self._windows.clear()

    def _summarize(self, name: str, window: _Window) -> None:
        held = sum(window.held_back.values())
        if not held:
            return
        elapsed = max(self._clock() - window.started, 0.0)
        by_type = ", ".join(f"{type_name}={count}" for type_name, count in window.held_back.most_common(5))
        if len(window.held_back) > 5:
            by_type += ", …"
        self._log.warning(
            "%s: %d more lines held back in the last %.0f s (by job type: %s); "
            "the logger %r at DEBUG writes every one",
            name,
            held,
            elapsed,
            by_type,
            self._log.name,
        )
        window.held_back.clear()

    def _summarize_later(self) -> None:
        # A storm that stops still gets its summary: flush once the oldest window ends.
        if self._summary_timer is not None:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        self._summary_timer = loop.call_later(self._window, self.flush)
