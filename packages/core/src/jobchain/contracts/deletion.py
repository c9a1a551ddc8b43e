"""Removing chains: ``chains_delete`` (on request, with cascade) and ``chains_prune`` (retention).

Part of the state contract (:class:`jobchain.contracts.StateTx`); every name is also importable
from ``jobchain.contracts`` and ``jobchain.contracts.state``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from jobchain.entities import Chain
from jobchain.errors import BlockerReference, InvalidArgumentError


@dataclass(frozen=True, slots=True, kw_only=True)
class ChainsDelete:
    """Delete chains (every job and blocker row). Missing ids are skipped.

    All-or-nothing: if a job outside the set is blocked by a chain in the set, nothing is
    deleted and the result lists those ``blocker_references`` (with no chains); the client
    turns them into BlockerReferenceError. ``cascade=True`` first adds, recursively, every
    chain that blocks a job of the set (blockers declared by any of its jobs).
    """

    chain_ids: Sequence[str]
    cascade: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class ChainsDeleted:
    """The deleted chains (as they were) and the ids of deleted jobs that were running."""

    chains: list[Chain]
    running_job_ids: list[str] = field(default_factory=list)
    blocker_references: list[BlockerReference] = field(default_factory=list)


@dataclass(frozen=True, slots=True, kw_only=True)
class ChainsPrune:
    """Retention: delete up to ``limit`` terminal chains that finished before the cutoff for
    their status, oldest first. ``None`` keeps that status forever.

    A chain qualifies when its last job is ``completed`` with ``completed_at <
    completed_before``, ``failed`` with ``failed_at < failed_before`` or ``cancelled`` with
    ``cancelled_at < cancelled_before``. Every job and blocker row of a deleted chain goes with
    it, as in :class:`ChainsDelete`; a qualifying chain that blocks a job outside the deleted
    set is skipped (kept until its dependents go). A qualifying chain that blocks a job of a
    chain that does not qualify is left out before the ``limit`` oldest are chosen, so it never
    crowds out the chains behind it. A reference through a ``resolves_on_any_end`` blocker
    (an ordering-key predecessor, a ``JobWait(runs_after_failed=True)``) never holds a
    qualifying chain back: that blocker is resolved by the chain being terminal, so the chain
    is deleted together with those blocker rows (the dependent keeps its other blockers) —
    otherwise a key that keeps getting chains would never lose its history. One caller at a
    time: a call that finds another prune in progress returns at once with ``busy=True`` and
    deletes nothing.
    ``locks_before`` also deletes up to ``limit`` deduplication bookkeeping rows (where the
    adapter keeps any) last used before it, and ordering-key rows whose last chain is gone.
    """

    completed_before: datetime | None = None
    failed_before: datetime | None = None
    cancelled_before: datetime | None = None
    locks_before: datetime | None = None
    limit: int = 500

    def __post_init__(self) -> None:
        if not isinstance(self.limit, int) or isinstance(self.limit, bool) or self.limit < 1:
            raise InvalidArgumentError(f"prune limit must be a positive integer, got {self.limit!r}")


@dataclass(frozen=True, slots=True, kw_only=True)
class PrunedChain:
    """A chain deleted by retention: its id, chain type and terminal status."""

    id: str
    type_name: str
    status: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ChainsPruned:
    """The deleted chains, and whether another prune held the lock (nothing was deleted)."""

    chains: list[PrunedChain] = field(default_factory=list)
    busy: bool = False
    locks_deleted: int = 0
    """Deduplication and ordering bookkeeping rows deleted (``locks_before``; at most ``limit``)."""
