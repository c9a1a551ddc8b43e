"""Entry point ``jobchain: redis``: declares redis:// and rediss:// as notify backends.

Imports no driver: the factory is named as a string and imported on first use.
"""

from __future__ import annotations

from jobchain.plugins import BackendSpec, hookimpl

_FACTORY = "jobchain_redis.notify:open_notify_adapter"


@hookimpl
def jobchain_backends() -> list[BackendSpec]:
    """redis:// (plain TCP) and rediss:// (TLS), both for the notify role."""
    return [
        BackendSpec(
            scheme=scheme,
            role="notify",
            distribution="jobchain-redis",
            factory=_FACTORY,
            description=f"Redis pub/sub wake-ups with Lua wake-hint budgets ({scheme}://)",
        )
        for scheme in ("redis", "rediss")
    ]
