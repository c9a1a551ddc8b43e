"""Capability-based skipping: a case skips only on a capability the adapter does not declare."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, TypeVar

import pytest

from jobchain.contracts import Capability

F = TypeVar("F", bound=Callable[..., Any])


def requires(*capabilities: Capability) -> Callable[[F], F]:
    """Mark a suite case as needing adapter capabilities (checked by :func:`skip_unless`)."""
    return pytest.mark.requires(*capabilities)


def skip_unless(request: pytest.FixtureRequest, declared: Iterable[Capability]) -> None:
    """Skip the running case, with the reason, if it needs a capability not in ``declared``."""
    have = frozenset(declared)
    for mark in request.node.iter_markers("requires"):
        for capability in mark.args:
            if capability not in have:
                pytest.skip(f"adapter does not declare {Capability(capability).name}")
