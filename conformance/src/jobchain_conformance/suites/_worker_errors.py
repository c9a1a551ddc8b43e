"""The liveness rule of the integration suite: a worker's loop errors fail the case.

A worker survives a failing backend: its heartbeat, reaper, claim loop, wake-up
subscription, periodic scheduler and pruner catch every error, log it once per streak,
emit a ``worker_error`` event and try again. That keeps a deployment running through an
outage, and it would also let an adapter whose ``worker_heartbeat`` always raises pass
every case: jobs still get done, nothing else fails.

So :class:`WorkerErrorWatch` observes the ``worker_error`` events of every worker an
:class:`~jobchain_conformance.suites._integration_base.IntegrationEnv` builds, and at
teardown the case fails if any of them reported an error of an operation the case did not
declare (:meth:`WorkerErrorWatch.expect`): on a healthy backend none of these loops ever
fails, so a single unexpected error is a failure. The message names the worker, the
operation, how many times it failed and its first error.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from jobchain.contracts import Event

CLAIM_LOOP = "claim_loop"
"""The name the rule gives the claim loop's errors (its events name no operation): a claim
(``jobs_acquire``), the look-up of the next due job, a buffered job's start."""

LOOP_OPERATIONS = frozenset(
    {
        "worker_heartbeat",
        "jobs_reap_expired",
        CLAIM_LOOP,
        "listen_job_scheduled",
        "periodic",
        "chains_prune",
    }
)
"""The operations whose failures a worker reports as ``worker_error`` events."""


@dataclass(slots=True)
class LoopErrors:
    """The errors one worker reported for one operation during a case."""

    worker_id: str
    operation: str
    count: int
    first_error: str

    def describe(self) -> str:
        return (
            f"worker {self.worker_id}: {self.operation} failed {self.count} time(s); "
            f"first error: {self.first_error}"
        )


class WorkerErrorWatch:
    """Records the ``worker_error`` events of the watched workers, by worker and operation.

    An observer (added to the watched workers' clients), which reads none of the events
    transactions buffer (``transaction_events = False``): watching costs a client that had
    no observer nothing beyond the worker's own events.
    """

    transaction_events = False

    def __init__(self) -> None:
        self._workers: set[str] = set()
        self._errors: dict[tuple[str, str], LoopErrors] = {}
        # Operation → the workers it is expected of (None: every worker).
        self._expected: dict[str, set[str] | None] = {}

    def watch(self, worker_id: str) -> None:
        """Count this worker's errors."""
        self._workers.add(worker_id)

    def expect(self, operations: Iterable[str], worker_id: str | None = None) -> None:
        """Errors of ``operations`` (every one if empty) of ``worker_id`` (every worker if None)
        are expected: they do not fail the case."""
        names = list(operations) or sorted(LOOP_OPERATIONS)
        unknown = sorted(set(names) - LOOP_OPERATIONS)
        if unknown:
            known = ", ".join(sorted(LOOP_OPERATIONS))
            raise ValueError(f"no worker loop operation is called {', '.join(unknown)}; known: {known}")
        for name in names:
            workers = self._expected.get(name, set())
            if worker_id is None or workers is None:
                self._expected[name] = None  # every worker's
            else:
                self._expected[name] = workers | {worker_id}

    def on_event(self, event: Event) -> None:
        if event.name != "worker_error":
            return
        attributes = event.attributes
        worker_id = str(attributes.get("worker.id", ""))
        if worker_id not in self._workers:
            return
        operation = str(attributes.get("operation", CLAIM_LOOP))
        key = (worker_id, operation)
        seen = self._errors.get(key)
        if seen is None:
            error = str(attributes.get("error", "?"))
            self._errors[key] = LoopErrors(worker_id, operation, 1, error)
        else:
            seen.count += 1

    def errors(self) -> list[LoopErrors]:
        """Every error recorded, expected or not, by worker and operation."""
        return list(self._errors.values())

    def unexpected(self) -> list[LoopErrors]:
        """The errors no declaration covers."""
        return [errors for errors in self._errors.values() if not self._is_expected(errors)]

    def _is_expected(self, errors: LoopErrors) -> bool:
        if errors.operation not in self._expected:
            return False
        workers = self._expected[errors.operation]
        return workers is None or errors.worker_id in workers

    def failure(self) -> str | None:
        """The failure message of the case (None: no unexpected error)."""
        unexpected = self.unexpected()
        if not unexpected:
            return None
        lines = "\n".join(f"  {errors.describe()}" for errors in unexpected)
        return (
            "a worker's loop kept failing (its errors were only reported as worker_error events):\n"
            f"{lines}\n"
            "On a working backend these operations never fail; a case that injects failures "
            "declares them with env.expect_worker_errors(...)."
        )
