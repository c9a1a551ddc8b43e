"""The notify contract: best-effort wake-ups and signals; correctness never depends on delivery."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
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
