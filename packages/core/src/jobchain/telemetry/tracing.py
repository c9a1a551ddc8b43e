"""Traces through the OpenTelemetry API (extra ``jobchain[otel]``): one trace per chain.

* ``publish <type>`` (PRODUCER): creating a job — a chain start (``start_chain(s)``) or a
  continuation. Its parent is the caller's current span (the web request; for a
  continuation, the attempt that continued). Its context is injected with the global
  propagator (W3C ``traceparent`` by default) into the carrier stored as the job's
  ``trace_context``. A job with blockers links to each blocker chain's stored context.
* ``process <type>`` (CONSUMER): one attempt, current while the handler runs (spans the
  handler opens nest under it). Its parent is the job's stored context, and it links to it
  (the messaging conventions' creation context). A batch is one span, linked to every job.

So a chain started in a web request shows as one trace: the request, the start's publish
span, the first attempt, the continuation's publish span, the next attempt, and so on.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from contextvars import Token
from typing import Any

from jobchain.telemetry._extras import OTEL_EXTRA, MissingExtraError

try:
    from opentelemetry import context as otel_context
    from opentelemetry import propagate, trace
    from opentelemetry.context import Context
    from opentelemetry.propagators.textmap import TextMapPropagator
    from opentelemetry.trace import Link, Span, SpanKind, Status, StatusCode, Tracer, TracerProvider
except ImportError:
    raise MissingExtraError(
        f"jobchain.telemetry.tracing needs opentelemetry-api: pip install '{OTEL_EXTRA}'"
    ) from None

from jobchain.contracts.observe import Event
from jobchain.contracts.state import JobCreated, NewJob
from jobchain.entities import Chain, Job
from jobchain.telemetry import names
from jobchain.telemetry.otel_metrics import _VERSION
from jobchain.worker.abort import AbortReason

log = logging.getLogger("jobchain.telemetry")

_LOST = {"job_attempt_" + reason.value: reason.value for reason in AbortReason}


def _carrier(value: object) -> dict[str, str] | None:
    if isinstance(value, dict) and value:
        return {str(k): str(v) for k, v in value.items()}
    return None


class _Publish:
    """The publish spans of one job-creating write."""

    __slots__ = ("_spans", "_tracing")

    def __init__(self, tracing: Tracing, jobs: Sequence[NewJob], blockers: Mapping[str, Chain]) -> None:
        self._tracing = tracing
        tracer = tracing.tracer
        spans: list[Span] = []
        for job in jobs:
            links = [
                link for b in job.blocker_chain_ids if (link := tracing.link_to(blockers.get(b))) is not None
            ]
            chain_id = job.chain_id or job.id
            spans.append(
                tracer.start_span(
                    names.publish_span_name(job.type_name),
                    kind=SpanKind.PRODUCER,
                    links=links,
                    attributes={
                        names.MESSAGING_SYSTEM: names.SYSTEM,
                        names.MESSAGING_OPERATION_NAME: "publish",
                        names.MESSAGING_OPERATION_TYPE: "send",
                        names.MESSAGING_DESTINATION: job.type_name,
                        names.MESSAGING_MESSAGE_ID: job.id,
                        names.MESSAGING_CONVERSATION_ID: chain_id,
                        names.CHAIN_ID: chain_id,
                        names.CHAIN_TYPE: job.chain_type_name,
                        names.CHAIN_INDEX: job.chain_index,
                    },
                )
            )
        self._spans = spans

    def inject(self, index: int, carrier: dict[str, str]) -> None:
        self._tracing.propagator.inject(carrier, context=trace.set_span_in_context(self._spans[index]))

    def end(self, created: Sequence[JobCreated] | None, error: BaseException | None) -> None:
        for index, span in enumerate(self._spans):
            if error is not None:
                span.record_exception(error)
                span.set_status(Status(StatusCode.ERROR, f"{type(error).__name__}: {error}"))
                span.set_attribute(names.ERROR_TYPE, type(error).__name__)
            elif created is not None:
                item = created[index]
                span.set_attribute(names.JOB_STATUS, item.job.status.value)
                if item.deduplicated:
                    # The start matched an existing chain: nothing new was queued.
                    span.set_attribute(names.DEDUPLICATED, True)
                    span.set_attribute(names.CHAIN_ID, item.job.chain_id)
            span.end()


class _Process:
    """The process span of one attempt (or batch), current in the attempt's task."""

    __slots__ = ("_jobs", "_span", "_token", "_tracing", "_worker_id", "failed")

    def __init__(self, tracing: Tracing, jobs: Sequence[Job], worker_id: str) -> None:
        self._tracing = tracing
        self._jobs = jobs
        self._worker_id = worker_id
        self._span: Span | None = None
        self._token: Token[Context] | None = None
        self.failed = False

    @property
    def batch(self) -> bool:
        return len(self._jobs) != 1

    def enter(self) -> None:
        tracing = self._tracing
        jobs = self._jobs
        first = jobs[0]
        attributes: dict[str, Any] = {
            names.MESSAGING_SYSTEM: names.SYSTEM,
            names.MESSAGING_OPERATION_NAME: "process",
            names.MESSAGING_OPERATION_TYPE: "process",
            names.MESSAGING_DESTINATION: first.type_name,
            names.MESSAGING_CLIENT_ID: self._worker_id,
            names.WORKER_ID: self._worker_id,
        }
        parent = None
        if self.batch:
            attributes[names.MESSAGING_BATCH_COUNT] = len(jobs)
            links = [link for job in jobs if (link := tracing.link_to_job(job)) is not None]
        else:
            attributes |= {
                names.MESSAGING_MESSAGE_ID: first.id,
                names.MESSAGING_CONVERSATION_ID: first.chain_id,
                names.CHAIN_ID: first.chain_id,
                names.CHAIN_TYPE: first.chain_type_name,
                names.CHAIN_INDEX: first.chain_index,
                names.JOB_ATTEMPT: first.attempt,
            }
            links = []
            carrier = _carrier(first.trace_context)
            if carrier is not None:
                parent = tracing.propagator.extract(carrier)
                created = trace.get_current_span(parent).get_span_context()
                if created.is_valid:  # the parent, linked too: the message's creation context
                    links.append(Link(created))
        span = tracing.tracer.start_span(
            names.process_span_name(first.type_name),
            context=parent,
            kind=SpanKind.CONSUMER,
            attributes=attributes,
            links=links,
        )
        self._span = span
        self._token = otel_context.attach(trace.set_span_in_context(span))
        for job in jobs:
            tracing.active[job.id] = self

    def error(self, error: BaseException) -> None:
        span = self._span
        if span is not None:
            self.failed = True
            span.record_exception(error)
            span.set_status(Status(StatusCode.ERROR, f"{type(error).__name__}: {error}"))
            span.set_attribute(names.ERROR_TYPE, type(error).__name__)

    def exit(self) -> None:
        for job in self._jobs:
            if self._tracing.active.get(job.id) is self:
                del self._tracing.active[job.id]
        if self._token is not None:
            otel_context.detach(self._token)
            self._token = None
        if self._span is not None:
            self._span.end()
            self._span = None

    def outcome(self, event: Event) -> None:
        """Record what the worker reports about one job of this attempt."""
        span = self._span
        if span is None:
            return
        name, attrs = event.name, event.attributes
        result: str | None = None
        extra: dict[str, Any] = {}
        if name == "job_attempt_completed":
            result = "continued" if attrs.get("continued") else "completed"
        elif name == "job_attempt_failed":
            result = "failed" if attrs.get("final") else "retried"
            if attrs.get("rescheduled_at"):
                extra[names.RESCHEDULED_AT] = str(attrs["rescheduled_at"])
            if attrs.get("reason"):
                extra[names.FAIL_REASON] = str(attrs["reason"])
            if attrs.get("error.type"):
                extra[names.ERROR_TYPE] = str(attrs["error.type"])
            if not self.failed and not self.batch:  # e.g. failed without running: attempts exhausted
                span.set_status(Status(StatusCode.ERROR, str(attrs.get("error", ""))))
        elif name == "job_attempt_waiting":
            result = "waiting"
        elif name == "job_timed_out":
            span.add_event(
                "jobchain.attempt.timed_out", {"jobchain.timeout": float(attrs.get("timeout") or 0)}
            )
            return
        elif name in _LOST:
            result = _LOST[name]
        else:
            return
        if self.batch:
            span.add_event(f"job {result}", {names.MESSAGING_MESSAGE_ID: str(attrs.get("job.id"))} | extra)
            return
        span.set_attribute(names.RESULT, result)
        for key, value in extra.items():
            span.set_attribute(key, value)


class Tracing:
    """jobchain's spans through the OpenTelemetry tracing API.

    ``tracer_provider`` defaults to the global one, ``propagator`` to the global text-map
    propagator (W3C trace context and baggage unless configured otherwise). An observer with
    the ``ObservesJobCreation`` and ``ObservesAttempts`` abilities: pass it to
    ``jobchain.connect(observers=[...])`` in the processes that start chains and in workers.
    """

    transaction_events = False
    """Tracing reads only the worker's attempt events: transactions need not build theirs."""

    def __init__(
        self, tracer_provider: TracerProvider | None = None, propagator: TextMapPropagator | None = None
    ) -> None:
        self.tracer: Tracer = trace.get_tracer("jobchain", _VERSION, tracer_provider=tracer_provider)
        self.propagator: TextMapPropagator = propagator or propagate.get_global_textmap()
        self.active: dict[str, _Process] = {}  # job id -> its attempt's scope

    def link_to(self, chain: Chain | None) -> Link | None:
        """A link to a chain's stored start context (None if it has none)."""
        return None if chain is None else self.link_to_job(chain.root)

    def link_to_job(self, job: Job) -> Link | None:
        """A link to a job's stored context (None if it has none, or not a valid one)."""
        carrier = _carrier(job.trace_context)
        if carrier is None:
            return None
        context = trace.get_current_span(self.propagator.extract(carrier)).get_span_context()
        return Link(context) if context.is_valid else None

    def on_event(self, event: Event) -> None:
        """Record a worker's ``job_attempt_*`` event on the span of its attempt."""
        if not event.name.startswith("job_"):
            return
        scope = self.active.get(str(event.attributes.get("job.id")))
        if scope is not None:
            scope.outcome(event)

    def creation_scope(
        self, jobs: Sequence[NewJob], blockers: Mapping[str, Chain], parent: Job | None
    ) -> _Publish:
        """Start one ``publish <type>`` span per new job (``ObservesJobCreation``)."""
        return _Publish(self, jobs, blockers)

    def attempt_scope(self, jobs: Sequence[Job], worker_id: str) -> _Process:
        """The ``process <type>`` span of one attempt or batch (``ObservesAttempts``)."""
        return _Process(self, jobs, worker_id)
