"""Entry point ``jobchain: nats``: declares nats:// as a notify backend.

Imports no driver: the factory is named as a string and imported on first use.
"""

from __future__ import annotations

from jobchain.plugins import BackendSpec, hookimpl


@hookimpl
def jobchain_backends() -> list[BackendSpec]:
    """nats:// for the notify role."""
    return [
        BackendSpec(
            scheme="nats",
            role="notify",
            distribution="jobchain-nats",
            factory="jobchain_nats.notify:open_notify_adapter",
            description="NATS core subjects for wake-ups, JetStream KV wake-hint budgets",
        )
    ]
