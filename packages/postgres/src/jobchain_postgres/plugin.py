"""Entry point ``jobchain: postgres``: declares postgresql:// and postgres:// for state and notify.

Imports no driver: the factories are ``"module:attr"`` strings loaded on first use. A
``+psycopg`` driver suffix (``postgresql+psycopg://``) selects the same factories.
"""

from __future__ import annotations

from jobchain.plugins.hookspecs import BackendSpec, hookimpl

DISTRIBUTION = "jobchain-postgres"


@hookimpl
def jobchain_backends() -> list[BackendSpec]:
    """postgresql:// and postgres://, each for state (psycopg pool; a synchronous one for
    jobchain.sync) and notify (LISTEN/NOTIFY)."""
    specs: list[BackendSpec] = []
    for scheme in ("postgresql", "postgres"):
        specs.append(
            BackendSpec(
                scheme=scheme,
                role="state",
                distribution=DISTRIBUTION,
                factory="jobchain_postgres.state:open_state_adapter",
                sync_factory="jobchain_postgres.sync:open_sync_state_adapter",
                scratch="jobchain_postgres.testing:scratch",
                description="PostgreSQL state (psycopg 3; ?schema=, ?table_prefix=, ?claim=atomic-update)",
            )
        )
        specs.append(
            BackendSpec(
                scheme=scheme,
                role="notify",
                distribution=DISTRIBUTION,
                factory="jobchain_postgres.notify:open_notify_adapter",
                description="PostgreSQL LISTEN/NOTIFY (one listening connection; ?channel_prefix=)",
            )
        )
    return specs
