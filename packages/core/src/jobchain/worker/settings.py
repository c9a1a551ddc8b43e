"""Attempt settings per job type, resolved once: processor → job type → worker → library default.

``max_attempts`` distinguishes UNSET (inherit from the next level) from None (unlimited): the
first level that sets it wins, and the library's :data:`DEFAULT_MAX_ATTEMPTS` applies when none
does. ``timeout`` is None where a level sets no deadline.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import timedelta

from jobchain.errors import InvalidArgumentError
from jobchain.job_types import DEFAULT_MAX_ATTEMPTS, UNSET, MaxAttempts
from jobchain.worker.backoff import DEFAULT_BACKOFF, DEFAULT_LEASE, Backoff, LeaseConfig
from jobchain.worker.processors import Processor, SyncHandlerWrapper
from jobchain.worker.runner import AttemptSettings


class WorkerSettings:
    """The retry, lease and recovery settings of every type a worker serves.

    The job type already carries its registry slice's defaults (``JobTypes(retry=...)``), so
    the order is processor → job type (→ registry) → worker → library default.
    """

    def __init__(
        self,
        processors: Mapping[str, Processor],
        *,
        retry: Backoff | None,
        lease: LeaseConfig | None,
        recovery: Backoff,
        max_attempts: MaxAttempts = UNSET,
        timeout: timedelta | None = None,
        sync_handler_wrapper: SyncHandlerWrapper | None = None,
    ) -> None:
        self.worker_lease = lease or DEFAULT_LEASE
        self._by_type = {
            name: AttemptSettings(
                retry=p.retry or p.job_type.retry or retry or DEFAULT_BACKOFF,
                lease=p.lease or p.job_type.lease or self.worker_lease,
                recovery=recovery,
                max_attempts=resolve_max_attempts(p.max_attempts, p.job_type.max_attempts, max_attempts),
                timeout=p.timeout or p.job_type.timeout or timeout,
                fail_on=p.job_type.fail_on,
                sync_wrapper=sync_handler_wrapper,
            )
            for name, p in processors.items()
        }

    def of(self, type_name: str) -> AttemptSettings:
        """The settings of one served type."""
        return self._by_type[type_name]

    def lease_of(self, type_name: str) -> timedelta:
        """How long a claimed job of ``type_name`` is leased."""
        return self._by_type[type_name].lease.duration

    @property
    def claim_lease(self) -> timedelta:
        """The claim's ``lease_for``: the worker's lease; types leased otherwise are listed apart."""
        return self.worker_lease.duration

    def type_leases(self) -> dict[str, timedelta]:
        """Each served type whose lease differs from :attr:`claim_lease` (a claim's ``type_leases``)."""
        default = self.claim_lease
        return {
            name: settings.lease.duration
            for name, settings in sorted(self._by_type.items())
            if settings.lease.duration != default
        }

    def shortest_lease(self) -> timedelta:
        """The shortest lease among the served types."""
        return min(s.lease.duration for s in self._by_type.values())


def resolve_max_attempts(*levels: MaxAttempts) -> int | None:
    """The first level that sets a limit (an int, or None for unlimited), else the default."""
    for level in levels:
        if level is not UNSET:
            return level
    return DEFAULT_MAX_ATTEMPTS


def positive_seconds(name: str, value: float) -> float:
    """``value`` as float seconds if it is a positive, finite number, else InvalidArgumentError."""
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or value <= 0
    ):
        raise InvalidArgumentError(f"{name} must be a positive number of seconds, got {value!r}")
    return float(value)


def count_setting(name: str, value: int, minimum: int) -> int:
    """``value`` if it is an integer of at least ``minimum``, else InvalidArgumentError."""
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise InvalidArgumentError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return value


def aging_setting(value: timedelta | float) -> timedelta:
    """``Worker(priority_aging=)`` as a positive timedelta (seconds accepted), else InvalidArgumentError."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = timedelta(seconds=positive_seconds("priority_aging", value))
    if not isinstance(value, timedelta) or value <= timedelta(0):
        raise InvalidArgumentError(f"priority_aging must be a positive timedelta, got {value!r}")
    return value


def wrapper_setting(value: SyncHandlerWrapper | None) -> SyncHandlerWrapper | None:
    """``Worker(sync_handler_wrapper=)``: None or a callable, else InvalidArgumentError."""
    if value is not None and not callable(value):
        raise InvalidArgumentError(f"sync_handler_wrapper must be a callable or None, got {value!r}")
    return value
