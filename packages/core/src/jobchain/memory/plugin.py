"""Core's own plugin: declares ``memory://`` for state and notify (entry point ``jobchain: memory``).

Like every backend's plugin module it imports no adapter; the factories load on first use.
"""

from __future__ import annotations

from jobchain.plugins.hookspecs import BackendSpec, hookimpl


@hookimpl
def jobchain_backends() -> list[BackendSpec]:
    """memory:// in both roles, served by the ``jobchain`` distribution itself."""
    return [
        BackendSpec(
            scheme="memory",
            role="state",
            distribution="jobchain",
            factory="jobchain.memory.factories:open_state_adapter",
            sync_factory="jobchain.memory.factories:open_sync_state_adapter",
            scratch="jobchain.memory.factories:scratch",
            description="in-process state (tests, single-process apps); memory://NAME is shared per name",
        ),
        BackendSpec(
            scheme="memory",
            role="notify",
            distribution="jobchain",
            factory="jobchain.memory.factories:open_notify_adapter",
            description="in-process notifications and wake hints; memory://NAME is shared per name",
        ),
    ]
