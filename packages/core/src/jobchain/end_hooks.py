"""Failure and cancel hooks: a job of your own, started when a job or a chain ends badly.

``types.define("order", ..., on_failed=order_failed, on_chain_cancelled=order_cancelled)``
declares them; the hook types take :class:`JobEnded` as input. They are not callbacks run by
whoever failed or cancelled the job: a worker may be gone, and ``jobchain cancel`` runs with
no handler code at all. Instead each worker registers its registry's hooks in the state
backend when it starts (one row per type), and the backend itself starts the hook job *in the
same transaction* as the change of status, whichever operation makes it — a worker failing a
job, a cancel from the client, the CLI or the dashboard, a blocker's failure propagating. So
a hook chain exists exactly once per failure or cancellation, is never started for a change
that rolled back, and runs as any job does: retried, visible, idempotent handlers.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal

import msgspec

from jobchain.contracts.end_hooks import TypeEndHooks
from jobchain.errors import InvalidArgumentError

if TYPE_CHECKING:
    from jobchain.entities import Job
    from jobchain.job_types import JobType, JobTypes

HOOK_FIELDS = ("on_failed", "on_cancelled", "on_chain_failed", "on_chain_cancelled")
"""The four hooks a job type may declare (``JobTypes.define`` keywords and ``JobType`` fields)."""


class JobEnded(msgspec.Struct, frozen=True, kw_only=True):
    """The input of a hook job: the job that failed or was cancelled, and its chain.

    ``scope`` is ``"job"`` for an ``on_failed``/``on_cancelled`` hook (declared on the job's
    type) and ``"chain"`` for ``on_chain_failed``/``on_chain_cancelled`` (declared on the
    chain's type; the job is the chain's last one, which ended the chain). ``error`` and
    ``error_type`` are the last recorded error of a failed job (``error_type`` is
    ``BlockerChainFailed`` or ``BlockerChainCancelled`` when a blocker chain's end failed it,
    and ``failed_by_chain_id`` names that chain); ``reason`` is a cancellation's reason.
    """

    event: Literal["failed", "cancelled"]
    scope: Literal["job", "chain"]
    job_id: str
    type_name: str
    chain_id: str
    chain_type_name: str
    at: datetime
    error: str | None = None
    error_type: str | None = None
    reason: str | None = None
    failed_by_chain_id: str | None = None


def hook_name(field: str, owner: str, hook: object) -> str | None:
    """The type name a ``define(on_...=)`` argument names (None: no hook), checked.

    A ``JobType`` must take :class:`JobEnded` as its input; a name is checked when a worker
    registers the hooks (:func:`end_hook_rows`), since its type may be defined later.
    """
    if hook is None:
        return None
    from jobchain.job_types import JobType, validate_type_name

    if isinstance(hook, JobType):
        _check_input(field, owner, hook)
        return hook.name
    if isinstance(hook, str):
        validate_type_name(hook)
        return hook
    raise InvalidArgumentError(f"{owner}: {field} must be a job type (or its name), got {hook!r}")


def end_hook_rows(job_types: JobTypes) -> list[TypeEndHooks]:
    """One row per type of ``job_types``, as a worker registers them.

    Every type gets a row, hooks or not, so a hook removed from the code is removed from the
    backend by the next worker that starts with that type. Raises InvalidArgumentError when a
    hook names a type the registry lacks or one whose input is not :class:`JobEnded`.
    """
    rows: list[TypeEndHooks] = []
    for job_type in job_types:
        hooks: dict[str, str | None] = {}
        for field in HOOK_FIELDS:
            name: str | None = getattr(job_type, field)
            if name is not None:
                if name not in job_types:
                    raise InvalidArgumentError(
                        f"{job_type.name}: {field} names job type {name!r}, which this registry does "
                        "not define; define it (input=jobchain.JobEnded) in a slice merged into this one"
                    )
                _check_input(field, job_type.name, job_types.get(name))
            hooks[field] = name
        rows.append(TypeEndHooks(type_name=job_type.name, priority=job_type.priority, **hooks))
    _refuse_cycles(rows)
    return rows


def _refuse_cycles(rows: list[TypeEndHooks]) -> None:
    """A hook whose own failure leads back to it would start hook jobs without end."""
    leads_to = {row.type_name: [h for f in HOOK_FIELDS if (h := getattr(row, f)) is not None] for row in rows}
    done: set[str] = set()

    def visit(name: str, path: list[str]) -> None:
        if name in path:
            cycle = [*path[path.index(name) :], name]
            raise InvalidArgumentError(
                f"the hooks form a cycle ({' -> '.join(cycle)}): a hook job that fails or is cancelled "
                "would start another without end; remove one of these hooks"
            )
        if name in done:
            return
        for hook in leads_to.get(name, ()):
            visit(hook, [*path, name])
        done.add(name)

    for name in leads_to:
        visit(name, [])


class EndHookWakes:
    """Which hook types a job's failure or cancellation started, as this process's registry says.

    The backend starts the hook jobs; this only lets the process that failed or cancelled the
    job wake the workers of those types after commit (a type the registry lacks, as in a CLI
    run without your code, is found by the workers' next poll instead).
    """

    __slots__ = ("_job_types",)

    def __init__(self, job_types: JobTypes) -> None:
        self._job_types = job_types

    def started_by(self, job: Job) -> list[str]:
        """The hook type names ``job`` (just failed or cancelled) started."""
        status = job.status.value
        if status not in ("failed", "cancelled"):
            return []
        names: list[str] = []
        for owner, field in ((job.type_name, f"on_{status}"), (job.chain_type_name, f"on_chain_{status}")):
            if owner in self._job_types:
                hook: str | None = getattr(self._job_types.get(owner), field)
                if hook is not None:
                    names.append(hook)
        return names


def _check_input(field: str, owner: str, hook: JobType[Any, Any]) -> None:
    if hook.input_type is not JobEnded:
        raise InvalidArgumentError(
            f"{owner}: {field} hook {hook.name!r} must take jobchain.JobEnded as its input "
            f"(define it with input=JobEnded), not {getattr(hook.input_type, '__name__', hook.input_type)!r}"
        )


__all__ = ["HOOK_FIELDS", "EndHookWakes", "JobEnded", "end_hook_rows", "hook_name"]
