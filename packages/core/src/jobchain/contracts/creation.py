"""Creating jobs: ``jobs_create`` (roots, continuations, deduplication, blockers, ordered keys).

Part of the state contract (:class:`jobchain.contracts.StateTx`); every name is also importable
from ``jobchain.contracts`` and ``jobchain.contracts.state``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from jobchain.entities import Deduplication, Job, JsonValue, Schedule, _use_slot_setting_init


@dataclass(frozen=True, slots=True, kw_only=True)
class NewJob:
    """A job to insert. ``chain_id=None`` starts a new chain whose id is this job's id.

    A continuation passes its chain's id and ``chain_index = previous + 1``; inserting an
    existing ``(chain_id, chain_index)`` returns the existing job with ``deduplicated=True``.
    ``blocker_chain_ids`` makes the job ``blocked`` while any of those chains is incomplete.
    """

    id: str
    type_name: str
    chain_type_name: str
    chain_id: str | None = None
    chain_index: int = 0
    input: JsonValue = None
    deduplication: Deduplication | None = None
    schedule: Schedule | None = None
    blocker_chain_ids: Sequence[str] = ()
    trace_context: JsonValue = None
    chain_trace_context: JsonValue = None
    runs_after_failed_blockers: bool = False
    """Stored on the job: see *Propagation* in :mod:`jobchain.contracts.lifecycle`."""
    priority: int = 0
    """Stored on the job (validated by the client: ``validate_priority``)."""
    ordering_key: str | None = None
    """Roots only (continuations pass None). See *Ordered keys* in ``contracts.scheduling``."""


@dataclass(frozen=True, slots=True, kw_only=True)
class JobsCreate:
    """Insert jobs in one batch; equal (deduplication key, chain type) items collapse onto the first.

    Deduplication scope ``incomplete`` matches a chain whose last job is not terminal (not
    completed, failed or cancelled): a failed chain never holds its key.

    A blocker chain that is already failed or cancelled when the job is inserted: a
    ``runs_after_failed_blockers`` job counts it as resolved; any other job is inserted
    ``failed`` at once, exactly as propagation would have failed it (``failed_by_chain_id`` =
    the first such blocker in declared order). ``incomplete_blocker_chain_ids`` lists the
    blocker chains that are not terminal.
    """

    jobs: Sequence[NewJob]
    now: datetime | None = None
    announce_on: str | None = None
    """A channel from ``AnnouncesWithinState``. An adapter that supports it may announce each
    new pending job's type there within this transaction (and mark the job ``announced``);
    others ignore it."""


@dataclass(frozen=True, slots=True, kw_only=True)
class JobCreated:
    """Result per input job, in input order."""

    job: Job
    deduplicated: bool = False
    incomplete_blocker_chain_ids: tuple[str, ...] = ()
    ordered_after: str | None = None
    """For a new root with an ordering key: the key's previous chain (its implicit blocker,
    listed in ``incomplete_blocker_chain_ids`` too while it is not terminal), or None when the
    key had no chain."""
    announced: bool = False
    """The adapter announced this job on ``announce_on`` within the transaction: the caller
    publishes no job-scheduled notice for it."""


# Built once per job of every start: the cheaper constructor (same signature and errors).
_use_slot_setting_init(NewJob)
_use_slot_setting_init(JobCreated)
