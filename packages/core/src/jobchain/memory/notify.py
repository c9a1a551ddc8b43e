"""In-process NotifyAdapter: listeners called synchronously inside ``publish_*``; a wake-hint budget.

Suitable for tests and for a client and workers that share one process (``memory://``).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Final

from jobchain.contracts.capabilities import Capability
from jobchain.contracts.notify import Listener, Unsubscribe
from jobchain.errors import AdapterClosedError, InvalidArgumentError

logger = logging.getLogger(__name__)

Clock = Callable[[], datetime]
"""Returns the current aware UTC time; injected by tests to move time without sleeping."""

WAKE_HINT_TTL: Final = timedelta(seconds=60)
"""How long a wake-hint budget lives after its last ``provide_wake_hint``."""

_JOB_SCHEDULED: Final = "job_scheduled"
_CHAIN_COMPLETED: Final = "chain_completed"
_JOB_OWNERSHIP_LOST: Final = "job_ownership_lost"


def _utc_now() -> datetime:
    return datetime.now(UTC)


class _Subscription:
    """One listener on one or more keys of a channel; identity is what unsubscribe removes."""

    __slots__ = ("keys", "listener")

    def __init__(self, keys: tuple[str, ...], listener: Listener) -> None:
        self.keys = keys
        self.listener = listener


@dataclass(slots=True)
class _Budget:
    remaining: int
    expires_at: datetime


class MemoryNotifyAdapter:
    """NotifyAdapter for one process: three channels, multiplexed listeners, wake-hint budgets.

    Delivery is synchronous: every listener subscribed when ``publish_*`` starts runs before it
    returns. A listener that raises is logged once and skipped; its peers and the publisher
    never see the exception. Wake-hint budgets expire ``hint_ttl`` (60 s) after the last
    provide, measured with ``clock``.
    """

    capabilities: frozenset[Capability] = frozenset({Capability.WAKE_HINTS})

    def __init__(self, clock: Clock | None = None, *, hint_ttl: timedelta = WAKE_HINT_TTL) -> None:
        if hint_ttl <= timedelta(0):
            raise InvalidArgumentError(f"hint_ttl must be positive, got {hint_ttl!r}")
        self._clock: Clock = clock or _utc_now
        self._hint_ttl = hint_ttl
        # One listener table per channel: key → subscriptions, in subscription order.
        self._channels: dict[str, dict[str, list[_Subscription]]] = {
            _JOB_SCHEDULED: {},
            _CHAIN_COMPLETED: {},
            _JOB_OWNERSHIP_LOST: {},
        }
        self._budgets: dict[str, _Budget] = {}
        self._closed = False
        # Guards the tables so a shared ``memory://name`` adapter may be used from several
        # threads; listeners are always called outside the lock.
        self._lock = threading.Lock()

    @property
    def closed(self) -> bool:
        """True once ``close()`` was called."""
        return self._closed

    # ------------------------------------------------------------------ channels

    async def publish_job_scheduled(self, type_name: str) -> None:
        """Call every listener of ``type_name`` with it."""
        self._publish(_JOB_SCHEDULED, type_name)

    async def listen_job_scheduled(self, type_names: Sequence[str], listener: Listener) -> Unsubscribe:
        """Call ``listener(type_name)`` for each publish of one of ``type_names``."""
        if isinstance(type_names, str):
            raise InvalidArgumentError("type_names must be a sequence of type names, not one string")
        return self._listen(_JOB_SCHEDULED, tuple(dict.fromkeys(type_names)), listener)

    async def publish_chain_completed(self, chain_id: str) -> None:
        """Call every listener of ``chain_id`` with it."""
        self._publish(_CHAIN_COMPLETED, chain_id)

    async def listen_chain_completed(self, chain_id: str, listener: Listener) -> Unsubscribe:
        """Call ``listener(chain_id)`` when the chain is published as completed."""
        return self._listen(_CHAIN_COMPLETED, (chain_id,), listener)

    async def publish_job_ownership_lost(self, job_id: str) -> None:
        """Call every listener of ``job_id`` with it."""
        self._publish(_JOB_OWNERSHIP_LOST, job_id)

    async def listen_job_ownership_lost(self, job_id: str, listener: Listener) -> Unsubscribe:
        """Call ``listener(job_id)`` when the job's ownership is published as lost."""
        return self._listen(_JOB_OWNERSHIP_LOST, (job_id,), listener)

    def _listen(self, channel: str, keys: tuple[str, ...], listener: Listener) -> Unsubscribe:
        if not callable(listener):
            raise InvalidArgumentError(f"listener must be callable, got {listener!r}")
        for key in keys:
            if not isinstance(key, str):
                raise InvalidArgumentError(f"{channel} keys must be strings, got {key!r}")
        subscription = _Subscription(keys, listener)
        with self._lock:
            self._check_open()
            table = self._channels[channel]
            for key in keys:
                table.setdefault(key, []).append(subscription)

        async def unsubscribe() -> None:
            self._remove(channel, subscription)

        return unsubscribe

    def _remove(self, channel: str, subscription: _Subscription) -> None:
        # Idempotent and safe after close(): close() already emptied the tables.
        with self._lock:
            table = self._channels[channel]
            for key in subscription.keys:
                listeners = table.get(key)
                if listeners is None:
                    continue
                table[key] = [s for s in listeners if s is not subscription]
                if not table[key]:
                    del table[key]

    def _publish(self, channel: str, key: str) -> None:
        with self._lock:
            self._check_open()
            # Snapshot: listeners added or removed by a listener take effect from the next publish.
            subscriptions = tuple(self._channels[channel].get(key, ()))
        for subscription in subscriptions:
            try:
                subscription.listener(key)
            except Exception:
                logger.exception(
                    "jobchain: a %s listener failed for %r; other listeners still run", channel, key
                )

    # ------------------------------------------------------------------ wake hints

    async def provide_wake_hint(self, type_name: str, count: int) -> None:
        """Add ``count`` (≥ 1) to the type's budget and restart its TTL."""
        if not isinstance(count, int) or isinstance(count, bool) or count < 1:
            raise InvalidArgumentError(f"wake-hint count must be an integer >= 1, got {count!r}")
        with self._lock:
            self._check_open()
            now = self._clock()
            budget = self._live_budget(type_name, now)
            remaining = count + (budget.remaining if budget is not None else 0)
            self._budgets[type_name] = _Budget(remaining, now + self._hint_ttl)

    async def consume_wake_hint(self, type_name: str) -> bool:
        """Claim one slot: True on a claim or when no live budget exists, False when exhausted."""
        with self._lock:
            self._check_open()
            budget = self._live_budget(type_name, self._clock())
            if budget is None:
                return True  # graceful degradation: no budget tracked means wake
            if budget.remaining <= 0:
                return False
            budget.remaining -= 1
            return True

    def _live_budget(self, type_name: str, now: datetime) -> _Budget | None:
        budget = self._budgets.get(type_name)
        if budget is not None and now >= budget.expires_at:
            del self._budgets[type_name]
            return None
        return budget

    # ------------------------------------------------------------------ lifecycle

    async def close(self) -> None:
        """Drop every listener and budget; idempotent. Later calls raise AdapterClosedError."""
        with self._lock:
            self._closed = True
            for table in self._channels.values():
                table.clear()
            self._budgets.clear()

    def _check_open(self) -> None:
        if self._closed:
            raise AdapterClosedError("this memory notify adapter is closed; open a new one")


__all__ = ["WAKE_HINT_TTL", "Clock", "MemoryNotifyAdapter"]
