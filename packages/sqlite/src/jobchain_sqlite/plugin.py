"""Entry point ``jobchain: sqlite``: declares ``sqlite://`` for the state role.

Imports no driver: the factory string is imported only when a sqlite:// URL is first used.
"""

from __future__ import annotations

from jobchain.plugins.hookspecs import BackendSpec, hookimpl


@hookimpl
def jobchain_backends() -> list[BackendSpec]:
    """sqlite:// (state), served by jobchain-sqlite."""
    return [
        BackendSpec(
            scheme="sqlite",
            role="state",
            distribution="jobchain-sqlite",
            factory="jobchain_sqlite.state:open_state_adapter",
            sync_factory="jobchain_sqlite.sync:open_sync_state_adapter",
            scratch="jobchain_sqlite.testing:scratch",
            description="SQLite file (aiosqlite): sqlite:///relative.db, sqlite:////abs/path.db, sqlite:///:memory:",
        )
    ]
