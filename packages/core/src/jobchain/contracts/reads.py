"""Reading single rows: ``chain_get``, ``job_get``, ``job_blockers_get``, ``job_next_available``.

Part of the state contract (:class:`jobchain.contracts.StateTx`); every name is also importable
from ``jobchain.contracts`` and ``jobchain.contracts.state``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True, slots=True, kw_only=True)
class ChainGet:
    """Read a chain; ``lock=True`` takes the exclusive lock on its last job until the tx ends."""

    chain_id: str
    lock: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class JobGet:
    """Read a job; ``lock=True`` takes the exclusive row lock until the tx ends.

    Claims, reaps and other ``lock=True`` reads wait for or skip that lock as for any row lock,
    but :class:`ChainsCancel` does not wait for it (an atomic attempt holds its job this way).
    """

    job_id: str
    lock: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class JobBlockersGet:
    """The blocker chains of a job, in the order they were declared."""

    job_id: str


@dataclass(frozen=True, slots=True, kw_only=True)
class JobNextAvailable:
    """Time until the earliest pending job of these types is eligible (zero if one is now).

    Paused types are left out. Type limits are not considered (see ``JobsAcquired.held_back``).
    """

    type_names: Sequence[str]
    now: datetime | None = None
