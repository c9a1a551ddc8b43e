"""Worker events: to the worker's event log and, after each write, to the client's observers."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from jobchain.contracts import Event
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
