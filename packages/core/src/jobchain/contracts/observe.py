"""Observability contract: events emitted after commit, never inside adapters."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable


@dataclass(frozen=True, slots=True)
class Event:
    """One observability event, e.g. ``chain_created`` or ``job_attempt_failed``."""

    name: str
    attributes: dict[str, Any] = field(default_factory=dict)


@runtime_checkable
class Observer(Protocol):
    """Receives events; an exception raised here is logged and swallowed."""

    def on_event(self, event: Event) -> None: ...


class NoopObserver:
    """The default observer: ignores every event."""

    def on_event(self, event: Event) -> None:
        return None
