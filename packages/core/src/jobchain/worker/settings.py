"""Attempt settings per job type, resolved once: processor → job type → worker → library default."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta

from jobchain.worker.backoff import DEFAULT_BACKOFF, DEFAULT_LEASE, Backoff, LeaseConfig
from jobchain.worker.processors import Processor
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
    ) -> None:
        self.worker_lease = lease or DEFAULT_LEASE
        self._by_type = {
            name: AttemptSettings(
                retry=p.retry or p.job_type.retry or retry or DEFAULT_BACKOFF,
                lease=p.lease or p.job_type.lease or self.worker_lease,
                recovery=recovery,
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
