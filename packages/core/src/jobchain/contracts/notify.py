"""The notify contract: best-effort wake-ups and signals; correctness never depends on delivery."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from jobchain.contracts.capabilities import Capability

Listener = Callable[[str], None]
"""Called with the type name, chain id or job id; exceptions are logged, never propagated."""

Unsubscribe = Callable[[], Awaitable[None]]
"""Stops one listener; safe to call twice and after the adapter closed."""


@runtime_checkable
class NotifyAdapter(Protocol):
    """Publish/subscribe on three channels plus the wake-hint budget.

    Guarantees (suite: NotifyAdapterSuite): listeners are multiplexed over one subscription
    per channel; ``listen_*`` returns once the subscription is live; a throwing listener
    never breaks its peers or the publisher; after ``close()`` every call raises
    AdapterClosedError except unsubscribes, which stay safe.
    """

    capabilities: frozenset[Capability]

    async def publish_job_scheduled(self, type_name: str) -> None: ...
    async def listen_job_scheduled(self, type_names: Sequence[str], listener: Listener) -> Unsubscribe: ...
    async def publish_chain_completed(self, chain_id: str) -> None: ...
    async def listen_chain_completed(self, chain_id: str, listener: Listener) -> Unsubscribe: ...
    async def publish_job_ownership_lost(self, job_id: str) -> None: ...
    async def listen_job_ownership_lost(self, job_id: str, listener: Listener) -> Unsubscribe: ...

    async def provide_wake_hint(self, type_name: str, count: int) -> None:
        """Add ``count`` to the type's wake budget (additive, TTL refreshed)."""
        ...

    async def consume_wake_hint(self, type_name: str) -> bool:
        """Claim one wake slot. True on a claim or when no budget is tracked; False when exhausted."""
        ...

    async def close(self) -> None: ...


@runtime_checkable
class PublishesChainsInBulk(Protocol):
    """Optional: a notify adapter that publishes many chain completions in one call.

    A worker's group commit completes many chains at once; one call (one statement or one
    pipeline) for all of them costs far less than one publish each. Each chain id must reach
    its listeners exactly as ``publish_chain_completed`` would deliver it.
    """

    async def publish_chains_completed(self, chain_ids: Sequence[str]) -> None: ...


@runtime_checkable
class AnnouncesWithinState(Protocol):
    """Optional: a notify adapter whose job-scheduled notices a state adapter can send itself,
    inside the transaction that creates the jobs (both on one PostgreSQL database, say).

    The notice is then delivered when that transaction commits and dropped when it (or the
    savepoint it was sent in) rolls back, with no publish after the commit: one round trip
    less per start, and a start on your own connection wakes workers at your commit.
    """

    def announce_channel_for(self, state: object) -> str | None:
        """The channel ``state``'s transactions may announce scheduled jobs on (its payload
        is the job type name), or None when ``state`` cannot reach this adapter's listeners."""
        ...


DeliveryWatcher = Callable[[bool, str | None], None]
"""Called with ``(degraded, reason)`` each time a delivery self-check changes the state:
``(True, "no probe within 2 s")`` when delivery stopped, ``(False, None)`` when it is back."""


@runtime_checkable
class ChecksDelivery(Protocol):
    """Optional: a notify adapter that checks its own delivery end to end (a probe it
    publishes and waits for on its own subscription), e.g. PostgreSQL LISTEN/NOTIFY behind a
    transaction-pooling proxy that silently drops LISTEN.

    ``degraded`` is the last check's verdict (False before any check): True means
    notifications are not arriving, so workers and ``await_chain`` must poll. A check never
    reports degraded just because nothing listens: it listens for its own probe. Watchers
    hear each change once (not every check); a watcher that raises is logged and ignored.
    The client turns changes into ``notify_degraded`` / ``notify_recovered`` events.
    """

    @property
    def degraded(self) -> bool: ...

    @property
    def degraded_reason(self) -> str | None:
        """Why the last check failed (None while not degraded)."""
        ...

    async def check_delivery(self) -> bool:
        """Run the check now: True when the probe came back (clears ``degraded``)."""
        ...

    def watch_delivery(self, watcher: DeliveryWatcher) -> Callable[[], None]:
        """Call ``watcher`` on every change of ``degraded``; returns an idempotent unwatch."""
        ...


@dataclass(frozen=True, slots=True, kw_only=True)
class NotifyDelivery:
    """What ``client.check_notify_delivery()`` found (``jobchain health --check-notify``)."""

    configured: bool
    """A notify backend is configured (False: workers and ``await_chain`` only poll)."""
    checked: bool
    """The backend checked its delivery just now (it has the ``ChecksDelivery`` ability)."""
    degraded: bool
    """Notifications do not arrive: workers and ``await_chain`` fall back to polling."""
    reason: str | None
    """Why it is degraded, or why nothing was checked; None when delivery works."""
