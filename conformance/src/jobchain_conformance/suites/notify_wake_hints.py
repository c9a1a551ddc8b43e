"""Wake hints: ``provide_wake_hint`` / ``consume_wake_hint``.

A budget caps how many idle workers wake for one batch of scheduled jobs. No budget
tracked means "wake" (graceful degradation), so adapters without WAKE_HINTS always
return True and only the first case applies to them.
"""

from __future__ import annotations

import uuid

from jobchain.contracts import Capability, NotifyAdapter
from jobchain_conformance.capabilities import requires


def _type_name() -> str:
    return f"type-{uuid.uuid4().hex[:12]}"


class WakeHintTests:
    """provide_wake_hint / consume_wake_hint."""

    async def test_consume_returns_true_when_no_budget_is_tracked(
        self, notify_adapter: NotifyAdapter
    ) -> None:
        type_name = _type_name()
        assert await notify_adapter.consume_wake_hint(type_name) is True
        assert await notify_adapter.consume_wake_hint(type_name) is True

    @requires(Capability.WAKE_HINTS)
    async def test_consume_claims_slots_up_to_the_provided_budget(
        self, notify_adapter: NotifyAdapter
    ) -> None:
        type_name = _type_name()
        await notify_adapter.provide_wake_hint(type_name, 2)
        claims = [await notify_adapter.consume_wake_hint(type_name) for _ in range(3)]
        assert claims == [True, True, False]

    @requires(Capability.WAKE_HINTS)
    async def test_provided_budgets_add_up_across_calls(self, notify_adapter: NotifyAdapter) -> None:
        type_name = _type_name()
        await notify_adapter.provide_wake_hint(type_name, 1)
        await notify_adapter.provide_wake_hint(type_name, 2)
        claims = [await notify_adapter.consume_wake_hint(type_name) for _ in range(4)]
        assert claims == [True, True, True, False]

    @requires(Capability.WAKE_HINTS)
    async def test_budgets_are_tracked_per_type_name(self, notify_adapter: NotifyAdapter) -> None:
        tracked, untracked = _type_name(), _type_name()
        await notify_adapter.provide_wake_hint(tracked, 1)
        assert await notify_adapter.consume_wake_hint(tracked) is True
        assert await notify_adapter.consume_wake_hint(tracked) is False
        assert await notify_adapter.consume_wake_hint(untracked) is True

    @requires(Capability.WAKE_HINTS)
    async def test_providing_again_after_exhaustion_refills_the_budget(
        self, notify_adapter: NotifyAdapter
    ) -> None:
        type_name = _type_name()
        await notify_adapter.provide_wake_hint(type_name, 1)
        assert await notify_adapter.consume_wake_hint(type_name) is True
        assert await notify_adapter.consume_wake_hint(type_name) is False
        await notify_adapter.provide_wake_hint(type_name, 1)
        assert await notify_adapter.consume_wake_hint(type_name) is True
        assert await notify_adapter.consume_wake_hint(type_name) is False
