"""Observability contract: events emitted after commit, never inside adapters.

Every observer receives :class:`Event` objects. Two optional abilities let an observer do
more, at no cost when none of the client's observers has them (checked with ``isinstance``
once per observer set, not per job):

* :class:`ObservesAttempts`: the worker opens the observer's scope around each attempt (or
  batch), in the task that runs it. Context variables the scope sets — an OpenTelemetry
  span made current — are what the handler sees, so spans it opens nest under the attempt.
* :class:`ObservesJobCreation`: the client (chain starts) and completions (continuations)
  open the observer's scope around the write that creates jobs, and store the propagation
  carrier it fills for each job (``Job.trace_context``; a root's is also its
  ``chain_trace_context``, which continuations copy). Several observers fill one carrier
  per job, as composite propagators do.

And one optional attribute: an observer whose ``transaction_events`` is False reads none of
the events buffered by transactions (``chain_created``, ``job_created``, ``job_completed``,
…; the worker's own ``job_attempt_*`` and ``worker_*`` events still come). When every
observer says so, transactions build no events at all, as without observers.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from jobchain.contracts.state import JobCreated, NewJob
    from jobchain.entities import Chain, Job


@dataclass(frozen=True, slots=True)
class Event:
    """One observability event, e.g. ``chain_created`` or ``job_attempt_failed``."""

    name: str
    attributes: dict[str, Any] = field(default_factory=dict)


@runtime_checkable
class Observer(Protocol):
    """Receives events; an exception raised here is logged and swallowed."""

    def on_event(self, event: Event) -> None: ...


class NoopObserver:
    """The default observer: ignores every event."""

    def on_event(self, event: Event) -> None:
        return None


class AttemptScope(Protocol):
    """One attempt's scope (see :class:`ObservesAttempts`). No method may raise."""

    def enter(self) -> None:
        """The attempt starts, before its handler; runs in the attempt's task."""

    def error(self, error: BaseException) -> None:
        """The handler (or its completion) raised ``error``; the outcome's events follow."""

    def exit(self) -> None:
        """The attempt is over and its outcome recorded; runs in the attempt's task."""


@runtime_checkable
class ObservesAttempts(Protocol):
    """Optional observer ability: a scope around every attempt the worker runs.

    ``attempt_scope(jobs, worker_id)`` is called once per attempt (``jobs`` has one job), or
    once per batch of a batch processor (every job of the batch). The worker calls
    ``enter()`` before the handler and ``exit()`` after the attempt's outcome was written, in
    the same task, so the ``job_attempt_*`` events of the attempt arrive in between.
    Guarantees: ``exit()`` follows every ``enter()``, also on cancellation; an exception from
    the observer is logged and never changes the attempt.
    """

    def attempt_scope(self, jobs: Sequence[Job], worker_id: str) -> AttemptScope: ...


class CreationScope(Protocol):
    """One job-creating write's scope (see :class:`ObservesJobCreation`). No method may raise."""

    def inject(self, index: int, carrier: dict[str, str]) -> None:
        """Add the propagation fields of the ``index``-th new job to ``carrier``."""

    def end(self, created: Sequence[JobCreated] | None, error: BaseException | None) -> None:
        """The write returned ``created`` (input order), or raised ``error``."""


@runtime_checkable
class ObservesJobCreation(Protocol):
    """Optional observer ability: a scope around each write that creates jobs.

    ``creation_scope(jobs, blockers, parent)``: ``jobs`` are about to be inserted (chain
    roots from ``start_chains``, or one continuation of ``parent``, the job it follows);
    ``blockers`` maps each blocker chain id the jobs name to the chain, already read. The
    carrier each job gets is stored as its ``trace_context``. Called in the caller's task
    (so the caller's current span is the natural parent).
    """

    def creation_scope(
        self, jobs: Sequence[NewJob], blockers: Mapping[str, Chain], parent: Job | None
    ) -> CreationScope: ...
