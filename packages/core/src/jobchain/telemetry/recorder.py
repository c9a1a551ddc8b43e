"""The metrics observer, written once for every export: events and attempt scopes → instruments.

:class:`MetricsObserver` turns the worker's and the client's events into counter and
histogram updates on a :class:`MetricSink` (OpenTelemetry's meter or prometheus_client), and
serves the queue gauges from the samplers it started (:meth:`MetricsObserver.sample_queue`).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

from jobchain.contracts.observe import Event, Observer
from jobchain.contracts.state import JobCreated, NewJob
from jobchain.entities import Job, JobStatus
from jobchain.stats import QueueStats
from jobchain.telemetry import names
from jobchain.telemetry.sampler import DEFAULT_SAMPLE_INTERVAL, QueueStatsSampler, Reporter
from jobchain.worker.abort import AbortReason

if TYPE_CHECKING:
    from jobchain.client import Client
    from jobchain.worker import Worker

Labels = tuple[str, ...]
"""A metric's attribute values, in the order of its ``attributes`` (what sinks cache by)."""

_LOST = {"job_attempt_" + reason.value: reason.value for reason in AbortReason}
_STATUSES = tuple(status.value for status in JobStatus)


class MetricSink(Protocol):
    """Where metric updates go (one implementation per export). Runs once or more per job:
    implementations cache their per-labels instruments (``labels`` is hashable)."""

    def add(self, metric: names.Metric, value: float, labels: Labels) -> None:
        """Add ``value`` to a counter."""

    def record(self, metric: names.Metric, value: float, labels: Labels) -> None:
        """Record ``value`` in a histogram."""


def gauge_values(metric: names.Metric, stats: QueueStats) -> list[tuple[float, Labels]]:
    """The values of one queue gauge in a queue-stats sample."""
    values: list[tuple[float, Labels]] = []
    for t in stats.types:
        label = (t.type_name,)
        if metric is names.QUEUE_DEPTH:
            values.append((float(t.due), label))
        elif metric is names.QUEUE_OLDEST_DUE_AGE:
            age = 0.0 if t.oldest_due_at is None else max(0.0, (stats.now - t.oldest_due_at).total_seconds())
            values.append((age, label))
        elif metric is names.QUEUE_EXPIRED_LEASES:
            values.append((float(t.expired_leases), label))
        elif metric is names.QUEUE_JOBS:
            values += [(float(t.count(s)), (t.type_name, s)) for s in _STATUSES]
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
        running = observer._running
        record = observer.sink.record
        for job in self._jobs:
            running[job.id] = self._started
            claimed = job.attempt_started_at
            if claimed is not None:
                latency = max(0.0, (claimed - job.scheduled_at).total_seconds())
                record(names.WAKEUP_LATENCY, latency, (job.type_name,))

    def error(self, error: BaseException) -> None:
        return None

    def exit(self) -> None:
        running = self._observer._running
        for job in self._jobs:  # an attempt cancelled at shutdown has no outcome: not timed
            running.pop(job.id, None)


class _Created:
    """A creation scope that counts the jobs a write created (a deduplicated start created none)."""

    __slots__ = ("_sink",)

    def __init__(self, sink: MetricSink) -> None:
        self._sink = sink

    def inject(self, index: int, carrier: dict[str, str]) -> None:
        return None

    def end(self, created: Sequence[JobCreated] | None, error: BaseException | None) -> None:
        for item in created or ():
            if not item.deduplicated:
                self._sink.add(names.JOBS_CREATED, 1, (item.job.type_name,))


class MetricsObserver:
    """Counts jobs and times attempts from events; serves the queue gauges from its samplers.

    Reads only the worker's events and its attempt and creation scopes, so transactions need
    not build their events for it (``transaction_events = False``).

    An observer (pass it to ``jobchain.connect(observers=[...])``, or let
    :meth:`sample_queue` attach it to a worker's client) with the ``ObservesAttempts``
    ability. Subclasses choose the sink: :class:`jobchain.telemetry.OpenTelemetryMetrics`,
    :class:`jobchain.telemetry.prometheus.PrometheusMetrics`.
    """

    transaction_events = False

    def __init__(self, sink: MetricSink) -> None:
        self.sink = sink
        self.samplers: list[QueueStatsSampler] = []
        self._running: dict[str, float] = {}  # job id -> its attempt's start (monotonic)
        self.notify_degraded = False
        """The last delivery verdict the client reported (``notify_degraded`` / ``notify_recovered``)."""
        # A zero series from the start: an alert on its increase needs the value before the first.
        sink.add(names.NOTIFY_DEGRADATIONS, 0, ())

    # ------------------------------------------------------------ observer

    def on_event(self, event: Event) -> None:
        """Count the worker's ``job_attempt_*`` events; time the attempts they end; follow the
        client's notify delivery verdict."""
        # Several events per job reach here: the common ones are decided first and cheaply.
        name = event.name
        attrs = event.attributes
        add = self.sink.add
        if name == "job_attempt_started":
            add(names.JOBS_STARTED, 1, (attrs["job.type"],))
        elif name == "job_attempt_completed":
            type_name = attrs["job.type"]
            add(names.JOBS_COMPLETED, 1, (type_name,))
            self._timed(attrs, type_name, "completed")
        elif name == "job_attempt_failed":
            type_name = attrs["job.type"]
            error_type = str(attrs.get("error.type", ""))
            if attrs.get("final"):
                add(names.JOBS_FAILED, 1, (type_name, error_type))
                self._timed(attrs, type_name, "failed")
            else:
                add(names.JOBS_RETRIED, 1, (type_name, error_type))
                self._timed(attrs, type_name, "retried")
        elif name == "job_attempt_waiting":  # attempt.wait_for: ended without a result, not a failure
            self._timed(attrs, attrs["job.type"], "waiting")
        elif name == "job_timed_out":
            add(names.JOBS_TIMED_OUT, 1, (attrs["job.type"],))
        elif name == "job_claim_expired":
            add(names.CLAIMS_EXPIRED, 1, (attrs["job.type"],))
        elif name == "worker_liveness_lapsed":
            add(names.WORKER_LIVENESS_LAPSES, 1, ())
        elif name in _LOST:
            type_name = attrs["job.type"]
            add(names.ATTEMPTS_LOST, 1, (type_name, _LOST[name]))
            self._timed(attrs, type_name, "lost")
        elif name == "notify_degraded":
            self.notify_degraded = True
            add(names.NOTIFY_DEGRADATIONS, 1, ())
        elif name == "notify_recovered":
            self.notify_degraded = False

    def _timed(self, attrs: dict[str, Any], type_name: str, outcome: str) -> None:
        started = self._running.pop(attrs["job.id"], None)
        if started is not None:
            self.sink.record(names.ATTEMPT_DURATION, time.monotonic() - started, (type_name, outcome))

    def attempt_scope(self, jobs: Sequence[Job], worker_id: str) -> _Timing:
        """Time the attempt and record each job's wake-up latency (``ObservesAttempts``)."""
        return _Timing(self, jobs)

    def creation_scope(self, jobs: Sequence[NewJob], blockers: object, parent: object) -> _Created:
        """Count the jobs the write creates (``ObservesJobCreation``)."""
        return _Created(self.sink)

    # ------------------------------------------------------------ queue gauges

    def queue_stats(self) -> QueueStats | None:
        """The current sample of the first elected sampler of this observer, if any."""
        for sampler in self.samplers:
            latest = sampler.latest
            if latest is not None:
                return latest
        return None

    def gauge(self, metric: names.Metric) -> list[tuple[float, Labels]]:
        """The values a gauge reports now (a queue gauge: none unless this process samples)."""
        if metric is names.NOTIFY_DEGRADED:
            return [(1.0 if self.notify_degraded else 0.0, ())]
        stats = self.queue_stats()
        return [] if stats is None else gauge_values(metric, stats)

    def sample_queue(
        self,
        worker: Worker | Client,
        *,
        interval: float = DEFAULT_SAMPLE_INTERVAL,
        reporter: Reporter | None = None,
    ) -> QueueStatsSampler:
        """A sampler feeding this observer's queue gauges, for ``worker`` (see :mod:`.sampler`).

        ``reporter``: ``"cluster"`` (default) reports only while ``worker`` is the oldest
        running worker of the registry, ``"name"`` the oldest of its name, ``"always"`` at
        every tick. Attaches this observer to the worker's client if it is not there yet.
        Pass a client instead of a worker in a process that runs no worker: it is not in the
        registry, so it always reports. Start it with ``async with`` (or ``start()``) once
        the worker runs.
        """
        from jobchain.client import Client

        if isinstance(worker, Client):
            client, owner = worker, None
        else:
            client, owner = worker.client, worker
        attach(client, self)
        sampler = QueueStatsSampler(client, owner, interval=interval, reporter=reporter)
        self.samplers.append(sampler)
        return sampler


def attach(client: Client, observer: Observer) -> None:
    """Add ``observer`` to ``client.observers`` unless it is there already."""
    if not any(o is observer for o in client.observers):
        client.observers = (*client.observers, observer)
