"""Span, attribute and metric names of jobchain.telemetry (no optional dependency).

Spans follow the OpenTelemetry messaging semantic conventions: a job is a message, its
type the destination, its id the message id and its chain the conversation. Metric names
are OpenTelemetry's; :data:`METRICS` gives each one's Prometheus name.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

SYSTEM = "jobchain"

# Messaging semantic conventions (https://opentelemetry.io/docs/specs/semconv/messaging/).
MESSAGING_SYSTEM = "messaging.system"
MESSAGING_OPERATION_NAME = "messaging.operation.name"
MESSAGING_OPERATION_TYPE = "messaging.operation.type"
MESSAGING_DESTINATION = "messaging.destination.name"
MESSAGING_MESSAGE_ID = "messaging.message.id"
MESSAGING_CONVERSATION_ID = "messaging.message.conversation_id"
MESSAGING_CLIENT_ID = "messaging.client.id"
MESSAGING_BATCH_COUNT = "messaging.batch.message_count"
ERROR_TYPE = "error.type"

# jobchain's own attributes.
CHAIN_ID = "jobchain.chain.id"
CHAIN_TYPE = "jobchain.chain.type"
CHAIN_INDEX = "jobchain.job.chain_index"
JOB_TYPE = "jobchain.job.type"
JOB_ATTEMPT = "jobchain.job.attempt"
JOB_STATUS = "jobchain.job.status"
DEDUPLICATED = "jobchain.deduplicated"
WORKER_ID = "jobchain.worker.id"
RESULT = "jobchain.attempt.result"
"""How the attempt ended: completed, continued, retried, failed, or a lost-ownership reason."""
RESCHEDULED_AT = "jobchain.job.rescheduled_at"
FAIL_REASON = "jobchain.job.fail_reason"
OUTCOME = "jobchain.attempt.outcome"
"""The attempt-duration histogram's outcome: completed, retried, failed or lost."""
LOST_REASON = "jobchain.attempt.lost_reason"


def publish_span_name(type_name: str) -> str:
    """The producer span of creating a job of ``type_name`` (chain start or continuation)."""
    return f"publish {type_name}"


def process_span_name(type_name: str) -> str:
    """The consumer span of an attempt (or batch) of ``type_name``."""
    return f"process {type_name}"


Kind = Literal["counter", "histogram", "gauge"]


@dataclass(frozen=True, slots=True)
class Metric:
    """One metric: its OpenTelemetry name, kind, unit, meaning and attribute keys."""

    name: str
    kind: Kind
    unit: str
    description: str
    attributes: tuple[str, ...]

    @property
    def prometheus_name(self) -> str:
        """The name in the Prometheus text format (counters get ``_total`` from the library)."""
        base = self.name.replace(".", "_")
        if self.unit == "s":
            base += "_seconds"
        return base


PROMETHEUS_LABELS = {
    JOB_TYPE: "job_type",
    ERROR_TYPE: "error_type",
    OUTCOME: "outcome",
    JOB_STATUS: "status",
    LOST_REASON: "reason",
}
"""Attribute key → Prometheus label name (``job`` is Prometheus's own target label)."""

JOBS_CREATED = Metric(
    "jobchain.jobs.created", "counter", "{job}",
    "Jobs created by this process: chain starts and continuations (deduplicated starts excluded).",
    (JOB_TYPE,),
)  # fmt: skip
JOBS_STARTED = Metric(
    "jobchain.jobs.started",
    "counter",
    "{attempt}",
    "Attempts started by this process's workers.",
    (JOB_TYPE,),
)
JOBS_COMPLETED = Metric(
    "jobchain.jobs.completed", "counter", "{job}",
    "Jobs completed (or continued) by this process's workers.", (JOB_TYPE,),
)  # fmt: skip
JOBS_RETRIED = Metric(
    "jobchain.jobs.retried", "counter", "{attempt}",
    "Failed attempts rescheduled for another try (including jobs handed back at shutdown).",
    (JOB_TYPE, ERROR_TYPE),
)  # fmt: skip
JOBS_FAILED = Metric(
    "jobchain.jobs.failed", "counter", "{job}",
    "Jobs failed for good by this process's workers (attempts exhausted, FailJob, fail_on).",
    (JOB_TYPE, ERROR_TYPE),
)  # fmt: skip
JOBS_TIMED_OUT = Metric(
    "jobchain.jobs.timed_out",
    "counter",
    "{attempt}",
    "Attempts their deadline failed: the handler still ran when its type's timeout passed "
    "(claim, prepare and commit time not counted) and the attempt ended as a timeout failure.",
    (JOB_TYPE,),
)
ATTEMPTS_LOST = Metric(
    "jobchain.attempts.lost", "counter", "{attempt}",
    "Attempts that lost their job to another attempt or a cancel meanwhile (taken by another "
    "worker, cancelled, deleted, completed elsewhere).",
    (JOB_TYPE, LOST_REASON),
)  # fmt: skip
CLAIMS_EXPIRED = Metric(
    "jobchain.claims.expired", "counter", "{job}",
    "Claimed jobs not started because their local deadline (claim sent + lease - safety margin) "
    "had passed: a late claim reply, a job left in the buffer behind a stall; left to their lease.",
    (JOB_TYPE,),
)  # fmt: skip
WORKER_LIVENESS_LAPSES = Metric(
    "jobchain.worker.liveness_lapses", "counter", "{lapse}",
    "Times a worker had no heartbeat confirmed by its liveness deadline and aborted its attempts "
    "(a stall or a partition: others may have presumed it dead).",
    (),
)  # fmt: skip
ATTEMPT_DURATION = Metric(
    "jobchain.attempt.duration", "histogram", "s",
    "Attempt duration, from the handler's start to its outcome written.", (JOB_TYPE, OUTCOME),
)  # fmt: skip
WAKEUP_LATENCY = Metric(
    "jobchain.job.wakeup_latency", "histogram", "s",
    "From the moment a job became due (scheduled_at: creation, schedule, retry or unblock) to its claim.",
    (JOB_TYPE,),
)  # fmt: skip
QUEUE_DEPTH = Metric(
    "jobchain.queue.depth",
    "gauge",
    "{job}",
    "Due jobs waiting for a worker (sampled queue stats).",
    (JOB_TYPE,),
)
QUEUE_JOBS = Metric(
    "jobchain.queue.jobs", "gauge", "{job}", "Jobs by status (sampled queue stats).", (JOB_TYPE, JOB_STATUS)
)
QUEUE_OLDEST_DUE_AGE = Metric(
    "jobchain.queue.oldest_due_age", "gauge", "s",
    "How long the longest-waiting due job has waited; 0 when none is due (sampled queue stats).",
    (JOB_TYPE,),
)  # fmt: skip
QUEUE_EXPIRED_LEASES = Metric(
    "jobchain.queue.expired_leases", "gauge", "{job}",
    "Running jobs whose lease has passed (sampled queue stats).", (JOB_TYPE,),
)  # fmt: skip

NOTIFY_DEGRADED = Metric(
    "jobchain.notify.degraded", "gauge", "1",
    "1 while the notify backend's delivery self-check reports notifications lost (workers and "
    "await_chain poll meanwhile), else 0; from the client's notify_degraded/notify_recovered events.",
    (),
)  # fmt: skip
NOTIFY_DEGRADATIONS = Metric(
    "jobchain.notify.degradations", "counter", "{degradation}",
    "Times the notify backend's delivery self-check found notifications lost (notify_degraded events).",
    (),
)  # fmt: skip

METRICS = (
    JOBS_CREATED,
    JOBS_STARTED,
    JOBS_COMPLETED,
    JOBS_RETRIED,
    JOBS_FAILED,
    JOBS_TIMED_OUT,
    ATTEMPTS_LOST,
    CLAIMS_EXPIRED,
    WORKER_LIVENESS_LAPSES,
    ATTEMPT_DURATION,
    WAKEUP_LATENCY,
    QUEUE_DEPTH,
    QUEUE_JOBS,
    QUEUE_OLDEST_DUE_AGE,
    QUEUE_EXPIRED_LEASES,
    NOTIFY_DEGRADED,
    NOTIFY_DEGRADATIONS,
)
"""Every metric jobchain.telemetry records, in both the OpenTelemetry and Prometheus exports."""

DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)
LATENCY_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)


def buckets(metric: Metric) -> tuple[float, ...]:
    """The histogram bucket bounds (seconds) of ``metric``."""
    return DURATION_BUCKETS if metric is ATTEMPT_DURATION else LATENCY_BUCKETS


MAX_ERROR_TYPES = 50
"""Distinct ``error_type`` label values one metrics observer keeps (its first seen)."""
OTHER_ERROR_TYPE = "other"
"""The ``error_type`` label value of every exception class past :data:`MAX_ERROR_TYPES`."""


class ErrorTypeBound:
    """Keeps a metric export's ``error_type`` values bounded.

    Each series lives as long as the process, and exception class names come from handler
    code (a class made per call, or named after its input, would add a series per job): the
    first :data:`MAX_ERROR_TYPES` distinct values keep their name, every later one becomes
    :data:`OTHER_ERROR_TYPE`, for every metric labelled with ``error.type``.
    """

    __slots__ = ("_index", "_kept", "limit")

    def __init__(self, limit: int = MAX_ERROR_TYPES) -> None:
        self.limit = limit
        self._kept: set[str] = set()
        self._index = {m.name: m.attributes.index(ERROR_TYPE) for m in METRICS if ERROR_TYPE in m.attributes}

    def value(self, error_type: str) -> str:
        """``error_type`` itself if it is (or can still become) one of the kept values, else ``other``."""
        if error_type in self._kept:
            return error_type
        if len(self._kept) >= self.limit:
            return OTHER_ERROR_TYPE
        self._kept.add(error_type)
        return error_type

    def labels(self, metric: Metric, labels: tuple[str, ...]) -> tuple[str, ...]:
        """``labels`` of ``metric`` with its ``error_type`` value bounded (others unchanged)."""
        index = self._index.get(metric.name)
        if index is None:
            return labels
        bounded = self.value(labels[index])
        if bounded == labels[index]:
            return labels
        return (*labels[:index], bounded, *labels[index + 1 :])
