"""Worker events: to the worker's event log and, after each write, to the client's observers;
and the observers' scopes around attempts (:class:`AttemptScopes`)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from jobchain.contracts import Event
from jobchain.contracts.observe import AttemptScope, ObservesAttempts
from jobchain.entities import Job
from jobchain.worker.event_log import EventLog

if TYPE_CHECKING:
    from jobchain.client import Client

log = logging.getLogger("jobchain.worker")


class WorkerEvents:
    """The worker's event methods (a base of :class:`~jobchain.worker.Worker`)."""

    client: Client
    worker_id: str
    _events: EventLog

    def _on_attempt_event(self, name: str, job: Job, attributes: dict[str, Any]) -> None:
        if not self.client.observers and not self._events.enabled_for(name):
            return  # nobody reads it: skip building it (this runs several times per job)
        self._emit(
            name,
            {
                "job.id": job.id,
                "job.type": job.type_name,
                "chain.id": job.chain_id,
                "job.attempt": job.attempt,
            }
            | attributes,
        )

    def _emit(self, name: str, attributes: dict[str, Any], /, *, log_line: bool = True) -> None:
        if log_line:
            self._events.log(name, attributes)
        if not self.client.observers:
            return
        event = Event(name=name, attributes={"worker.id": self.worker_id} | attributes)
        for observer in self.client.observers:
            try:
                observer.on_event(event)
            except Exception:
                log.exception("observer %r failed", observer)


class AttemptScopes:
    """The scopes of the client's ``ObservesAttempts`` observers around one attempt (or batch).

    Opened (and entered) only when the client has such observers; every call is guarded, so a
    failing observer is logged and never changes the attempt.
    """

    __slots__ = ("_scopes",)

    def __init__(self, observers: Sequence[ObservesAttempts], jobs: Sequence[Job], worker_id: str) -> None:
        scopes: list[AttemptScope] = []
        for observer in observers:
            try:
                scope = observer.attempt_scope(jobs, worker_id)
                scope.enter()
            except Exception:
                log.exception("observer %r failed to open an attempt scope", observer)
                continue
            scopes.append(scope)
        self._scopes = scopes

    def error(self, error: BaseException) -> None:
        """The handler raised ``error`` (before the failure is recorded)."""
        for scope in self._scopes:
            try:
                scope.error(error)
            except Exception:
                log.exception("attempt scope %r failed to record an error", scope)

    def exit(self) -> None:
        """The attempt is over: exit the scopes, innermost first."""
        for scope in reversed(self._scopes):
            try:
                scope.exit()
            except Exception:
                log.exception("attempt scope %r failed to exit", scope)
