"""The metrics observer, written once for every export: events and attempt scopes → instruments.

:class:`MetricsObserver` turns the worker's and the client's events into counter and
histogram updates on a :class:`MetricSink` (OpenTelemetry's meter or prometheus_client), and
serves the queue gauges from the samplers it started (:meth:`MetricsObserver.sample_queue`).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

from jobchain.contracts.observe import Event, Observer
from jobchain.entities import Job, JobStatus
from jobchain.stats import QueueStats
from jobchain.telemetry import names
from jobchain.telemetry.sampler import DEFAULT_SAMPLE_INTERVAL, QueueStatsSampler
from jobchain.worker.abort import AbortReason

if TYPE_CHECKING:
    from jobchain.client import Client
    from jobchain.worker import Worker

Attributes = dict[str, str]

_LOST = {"job_attempt_" + reason.value: reason.value for reason in AbortReason}
_STATUSES = tuple(status.value for status in JobStatus)


class MetricSink(Protocol):
    """Where metric updates go (one implementation per export)."""

    def add(self, metric: names.Metric, value: float, attributes: Attributes) -> None:
        """Add ``value`` to a counter."""

    def record(self, metric: names.Metric, value: float, attributes: Attributes) -> None:
        """Record ``value`` in a histogram."""


def gauge_values(metric: names.Metric, stats: QueueStats) -> list[tuple[float, Attributes]]:
    """The values of one queue gauge in a queue-stats sample."""
    values: list[tuple[float, Attributes]] = []
    for t in stats.types:
        label = {names.JOB_TYPE: t.type_name}
        if metric is names.QUEUE_DEPTH:
            values.append((float(t.due), label))
        elif metric is names.QUEUE_OLDEST_DUE_AGE:
            age = 0.0 if t.oldest_due_at is None else max(0.0, (stats.now - t.oldest_due_at).total_seconds())
            values.append((age, label))
        elif metric is names.QUEUE_EXPIRED_LEASES:
            values.append((float(t.expired_leases), label))
        elif metric is names.QUEUE_JOBS:
            values += [(float(t.count(s)), label | {names.JOB_STATUS: s}) for s in _STATUSES]
    return values


class _Timing:
    """An attempt scope that times the attempt and records each job's wake-up latency."""

    __slots__ = ("_jobs", "_observer", "_started")

    def __init__(self, observer: MetricsObserver, jobs: Sequence[Job]) -> None:
        self._observer = observer
        self._jobs = jobs
        self._started = 0.0

    def enter(self) -> None:
        self._started = time.monotonic()
        observer = self._observer
        for job in self._jobs:
            observer._running[job.id] = (self._started, job.type_name)
            claimed = job.attempt_started_at
            if claimed is not None:
                latency = max(0.0, (claimed - job.scheduled_at).total_seconds())
                observer.sink.record(names.WAKEUP_LATENCY, latency, {names.JOB_TYPE: job.type_name})

    def error(self, error: BaseException) -> None:
        return None

    def exit(self) -> None:
        running = self._observer._running
        for job in self._jobs:  # an attempt cancelled at shutdown has no outcome: not timed
            running.pop(job.id, None)


class MetricsObserver:
    """Counts jobs and times attempts from events; serves the queue gauges from its samplers.

    An observer (pass it to ``jobchain.connect(observers=[...])``, or let
    :meth:`sample_queue` attach it to a worker's client) with the ``ObservesAttempts``
    ability. Subclasses choose the sink: :class:`jobchain.telemetry.OpenTelemetryMetrics`,
    :class:`jobchain.telemetry.prometheus.PrometheusMetrics`.
    """

    def __init__(self, sink: MetricSink) -> None:
        self.sink = sink
        self.samplers: list[QueueStatsSampler] = []
        self._running: dict[str, tuple[float, str]] = {}  # job id -> (attempt start, type)

    # ------------------------------------------------------------ observer

    def on_event(self, event: Event) -> None:
        name = event.name
        attrs = event.attributes
        if name == "job_created":
            self.sink.add(names.JOBS_CREATED, 1, {names.JOB_TYPE: str(attrs.get("type_name"))})
            return
        if not name.startswith("job_"):
            return
        type_name = str(attrs.get("job.type"))
        labels = {names.JOB_TYPE: type_name}
        if name == "job_attempt_started":
            self.sink.add(names.JOBS_STARTED, 1, labels)
        elif name == "job_attempt_completed":
            self.sink.add(names.JOBS_COMPLETED, 1, labels)
            self._timed(attrs, labels, "completed")
        elif name == "job_attempt_failed":
            error = {names.ERROR_TYPE: str(attrs.get("error.type", ""))}
            if attrs.get("final"):
                self.sink.add(names.JOBS_FAILED, 1, labels | error)
                self._timed(attrs, labels, "failed")
            else:
                self.sink.add(names.JOBS_RETRIED, 1, labels | error)
                self._timed(attrs, labels, "retried")
        elif name == "job_timed_out":
            self.sink.add(names.JOBS_TIMED_OUT, 1, labels)
        elif name in _LOST:
            self.sink.add(names.ATTEMPTS_LOST, 1, labels | {names.LOST_REASON: _LOST[name]})
            self._timed(attrs, labels, "lost")

    def _timed(self, attrs: dict[str, object], labels: Attributes, outcome: str) -> None:
        started = self._running.pop(str(attrs.get("job.id")), None)
        if started is not None:
            duration = time.monotonic() - started[0]
            self.sink.record(names.ATTEMPT_DURATION, duration, labels | {names.OUTCOME: outcome})

    def attempt_scope(self, jobs: Sequence[Job], worker_id: str) -> _Timing:
        return _Timing(self, jobs)

    # ------------------------------------------------------------ queue gauges

    def queue_stats(self) -> QueueStats | None:
        """The current sample of the first elected sampler of this process, if any."""
        for sampler in self.samplers:
            latest = sampler.latest
            if latest is not None:
                return latest
        return None

    def gauge(self, metric: names.Metric) -> list[tuple[float, Attributes]]:
        """The values a queue gauge reports now (none unless this process samples)."""
        stats = self.queue_stats()
        return [] if stats is None else gauge_values(metric, stats)

    def sample_queue(
        self, worker: Worker | Client, *, interval: float = DEFAULT_SAMPLE_INTERVAL
    ) -> QueueStatsSampler:
        """A sampler feeding this observer's queue gauges, for ``worker`` (see :mod:`.sampler`).

        Attaches this observer to the worker's client if it is not there yet. Pass a client
        instead of a worker in a process that runs no worker: it then always samples. Start
        it with ``async with`` (or ``start()``) once the worker runs.
        """
        from jobchain.client import Client

        if isinstance(worker, Client):
            client, owner = worker, None
        else:
            client, owner = worker.client, worker
        attach(client, self)
        sampler = QueueStatsSampler(client, owner, interval=interval)
        self.samplers.append(sampler)
        return sampler


def attach(client: Client, observer: Observer) -> None:
    """Add ``observer`` to ``client.observers`` unless it is there already."""
    if not any(o is observer for o in client.observers):
        client.observers = (*client.observers, observer)
