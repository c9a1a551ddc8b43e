"""Which distribution provides which URL scheme, for install hints in UnknownSchemeError.

This table only produces hints; backends are always found through their entry points.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

from jobchain.plugins.hookspecs import Role

KNOWN_BACKENDS: Final[Mapping[tuple[str, Role], str]] = MappingProxyType(
    {
        ("memory", "state"): "jobchain",
        ("memory", "notify"): "jobchain",
        ("postgresql", "state"): "jobchain-postgres",
        ("postgresql", "notify"): "jobchain-postgres",
        ("postgres", "state"): "jobchain-postgres",
        ("postgres", "notify"): "jobchain-postgres",
        ("sqlite", "state"): "jobchain-sqlite",
        ("redis", "notify"): "jobchain-redis",
        ("rediss", "notify"): "jobchain-redis",
        ("nats", "notify"): "jobchain-nats",
    }
)
"""(scheme, role) → the distribution that serves it."""


def distribution_for(scheme: str, role: Role) -> str | None:
    """The distribution that serves ``scheme`` for ``role``, if jobchain knows one."""
    return KNOWN_BACKENDS.get((scheme, role))


def roles_known_for(scheme: str) -> dict[Role, str]:
    """Every role jobchain knows a distribution for, for this scheme."""
    return {role: dist for (known, role), dist in KNOWN_BACKENDS.items() if known == scheme}


__all__ = ["KNOWN_BACKENDS", "distribution_for", "roles_known_for"]
