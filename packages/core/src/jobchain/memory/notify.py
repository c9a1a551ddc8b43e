"""In-process NotifyAdapter: listeners called synchronously inside ``publish_*``; a wake-hint budget.

Suitable for tests and for a client and workers that share one process (``memory://``).
Adapters opened on one :class:`MemoryNotifyHub` hear each other's publishes and share their
wake-hint budgets, as adapters connected to one broker do; an adapter opened without a hub
gets a private one and is alone.
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
_CHANNELS: Final = (_JOB_SCHEDULED, _CHAIN_COMPLETED, _JOB_OWNERSHIP_LOST)


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


class MemoryNotifyHub:
    """The in-process broker behind :class:`MemoryNotifyAdapter`: who listens to which key, and
    the wake-hint budgets.

    Share one hub between adapters (``MemoryNotifyAdapter(hub=hub)``) to get what several
    connections to one broker give: a publish on any adapter reaches the listeners of every
    adapter, and a budget provided on one is consumed on another. Each adapter holds one hub
    subscription per key, however many of its listeners share the key.
    """

    def __init__(self) -> None:
        # channel → key → subscribed adapters (a dict used as an ordered set).
        self._subscribers: dict[str, dict[str, dict[MemoryNotifyAdapter, None]]] = {
            channel: {} for channel in _CHANNELS
        }
        self._budgets: dict[str, _Budget] = {}
        # Lock order: an adapter's lock, then the hub's; the hub never calls an adapter while
        # holding its own lock.
        self._lock = threading.Lock()

    def interrupt(self, adapter: MemoryNotifyAdapter) -> None:
        """Drop ``adapter``'s subscriptions, as a broker drops those of a broken connection, and
        report the lost connection to the adapter, as a driver does. (For tests.)

        A correct adapter subscribes again at once: an in-process broker is always reachable,
        so there is no window in which a publish is lost. Budgets live in the hub and stay.
        """
        self._detach(adapter)
        adapter._connection_lost()

    # -- used by MemoryNotifyAdapter -------------------------------------------------------

    def _subscribe(self, adapter: MemoryNotifyAdapter, channel: str, key: str) -> None:
        with self._lock:
            self._subscribers[channel].setdefault(key, {})[adapter] = None

    def _unsubscribe(self, adapter: MemoryNotifyAdapter, channel: str, key: str) -> None:
        with self._lock:
            table = self._subscribers[channel]
            adapters = table.get(key)
            if adapters is not None:
                adapters.pop(adapter, None)
                if not adapters:
                    del table[key]

    def _detach(self, adapter: MemoryNotifyAdapter) -> None:
        with self._lock:
            for table in self._subscribers.values():
                for key in [key for key, adapters in table.items() if adapter in adapters]:
                    del table[key][adapter]
                    if not table[key]:
                        del table[key]

    def _publish(self, channel: str, key: str) -> None:
        with self._lock:
            adapters = tuple(self._subscribers[channel].get(key, ()))
        for adapter in adapters:
            adapter._deliver(channel, key)

    def _provide(self, type_name: str, count: int, now: datetime, ttl: timedelta) -> None:
        with self._lock:
            budget = self._live_budget(type_name, now)
            remaining = count + (budget.remaining if budget is not None else 0)
            self._budgets[type_name] = _Budget(remaining, now + ttl)

    def _consume(self, type_name: str, now: datetime) -> bool:
        with self._lock:
            budget = self._live_budget(type_name, now)
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


class MemoryNotifyAdapter:
    """NotifyAdapter for one process: three channels, multiplexed listeners, wake-hint budgets.

    Delivery is synchronous: every listener subscribed when ``publish_*`` starts, on this
    adapter or on another adapter of the same ``hub``, runs before it returns. A listener that
    raises is logged once and skipped; its peers and the publisher never see the exception.
    Wake-hint budgets expire ``hint_ttl`` (60 s) after the last provide, measured with
    ``clock``. Without ``hub`` the adapter has a private one (it is alone).
    """

    capabilities: frozenset[Capability] = frozenset({Capability.WAKE_HINTS})

    def __init__(
        self,
        clock: Clock | None = None,
        *,
        hint_ttl: timedelta = WAKE_HINT_TTL,
        hub: MemoryNotifyHub | None = None,
    ) -> None:
        if hint_ttl <= timedelta(0):
            raise InvalidArgumentError(f"hint_ttl must be positive, got {hint_ttl!r}")
        if hub is not None and not isinstance(hub, MemoryNotifyHub):
            raise InvalidArgumentError(f"hub must be a MemoryNotifyHub, got {hub!r}")
        self._clock: Clock = clock or _utc_now
        self._hint_ttl = hint_ttl
        self._hub = hub if hub is not None else MemoryNotifyHub()
        # One listener table per channel: key → subscriptions, in subscription order.
        self._channels: dict[str, dict[str, list[_Subscription]]] = {channel: {} for channel in _CHANNELS}
        self._closed = False
        # Guards the tables so a shared ``memory://name`` adapter may be used from several
        # threads; listeners are always called outside the lock.
        self._lock = threading.Lock()

    @property
    def closed(self) -> bool:
        """True once ``close()`` was called."""
        return self._closed

    @property
    def hub(self) -> MemoryNotifyHub:
        """The hub (broker) this adapter publishes and subscribes through."""
        return self._hub

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
                listeners = table.setdefault(key, [])
                if not listeners:
                    self._hub._subscribe(self, channel, key)  # the key's first listener here
                listeners.append(subscription)

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
                    self._hub._unsubscribe(self, channel, key)  # the key's last listener here

    def _publish(self, channel: str, key: str) -> None:
        with self._lock:
            self._check_open()
        self._hub._publish(channel, key)

    def _deliver(self, channel: str, key: str) -> None:
        """Called by the hub for a publish of ``key`` on ``channel`` (on any of its adapters)."""
        with self._lock:
            if self._closed:
                return
            # Snapshot: listeners added or removed by a listener take effect from the next publish.
            subscriptions = tuple(self._channels[channel].get(key, ()))
        for subscription in subscriptions:
            try:
                subscription.listener(key)
            except Exception:
                logger.exception(
                    "jobchain: a %s listener failed for %r; other listeners still run", channel, key
                )

    def _connection_lost(self) -> None:
        """Called by the hub after it dropped this adapter's subscriptions: subscribe again."""
        with self._lock:
            if self._closed:
                return
            for channel, table in self._channels.items():
                for key in table:
                    self._hub._subscribe(self, channel, key)

    # ------------------------------------------------------------------ wake hints

    async def provide_wake_hint(self, type_name: str, count: int) -> None:
        """Add ``count`` (≥ 1) to the type's budget and restart its TTL."""
        if not isinstance(count, int) or isinstance(count, bool) or count < 1:
            raise InvalidArgumentError(f"wake-hint count must be an integer >= 1, got {count!r}")
        with self._lock:
            self._check_open()
        self._hub._provide(type_name, count, self._clock(), self._hint_ttl)

    async def consume_wake_hint(self, type_name: str) -> bool:
        """Claim one slot: True on a claim or when no live budget exists, False when exhausted."""
        with self._lock:
            self._check_open()
        return self._hub._consume(type_name, self._clock())

    # ------------------------------------------------------------------ lifecycle

    async def close(self) -> None:
        """Drop every listener and leave the hub; idempotent. Later calls raise AdapterClosedError.

        Budgets stay in the hub, for the other adapters sharing it.
        """
        with self._lock:
            self._closed = True
            for table in self._channels.values():
                table.clear()
            self._hub._detach(self)

    def _check_open(self) -> None:
        if self._closed:
            raise AdapterClosedError("this memory notify adapter is closed; open a new one")


__all__ = ["WAKE_HINT_TTL", "Clock", "MemoryNotifyAdapter", "MemoryNotifyHub"]
