"""Issue 35: what the worker does when it may no longer hold its jobs is counted, not only
logged — claimed jobs it did not start because their local deadline had passed, and the times
it went past its liveness deadline (no heartbeat confirmed) and aborted its attempts."""

from __future__ import annotations

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from jobchain.contracts.observe import Event
from jobchain.telemetry import names
from jobchain.telemetry.prometheus import PrometheusMetrics


def _samples(metrics: PrometheusMetrics, family: str) -> dict[tuple[tuple[str, str], ...], float]:
    found: dict[tuple[tuple[str, str], ...], float] = {}
    for parsed in text_string_to_metric_families(generate_latest(metrics.registry).decode()):
        for sample in parsed.samples:
            if sample.name == family:
                found[tuple(sorted(sample.labels.items()))] = sample.value
    return found


def test_claims_not_started_past_their_deadline_are_counted_per_type() -> None:
    metrics = PrometheusMetrics()
    for index, type_name in enumerate(["mail", "mail", "sms"]):
        attributes = {"worker.id": "w", "job.id": f"j{index}", "job.type": type_name, "waited_seconds": 31.2}
        metrics.on_event(Event("job_claim_expired", attributes))
    assert names.CLAIMS_EXPIRED.name == "jobchain.claims.expired"
    assert _samples(metrics, "jobchain_claims_expired_total") == {
        (("job_type", "mail"),): 2.0,
        (("job_type", "sms"),): 1.0,
    }


def test_liveness_lapses_are_counted() -> None:
    metrics = PrometheusMetrics()
    for running in (3, 0):
        metrics.on_event(Event("worker_liveness_lapsed", {"worker.id": "w", "running": running}))
    assert _samples(metrics, "jobchain_worker_liveness_lapses_total") == {(): 2.0}
