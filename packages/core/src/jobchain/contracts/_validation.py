"""Checks shared by the params objects of the state contract (private)."""

from __future__ import annotations

from datetime import timedelta

from jobchain.errors import InvalidArgumentError


def _check_timedelta(name: str, value: timedelta | None, *, positive: bool = False) -> None:
    if value is None:
        return
    if value < timedelta(0) or (positive and value == timedelta(0)):
        raise InvalidArgumentError(
            f"{name} must be {'positive' if positive else 'non-negative'}, got {value!r}"
        )
