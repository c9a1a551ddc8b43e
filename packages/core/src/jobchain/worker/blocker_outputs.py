"""Typed blocker outputs: pick the blocker chains that ended with a job type and decode them.

A chain's output is its last job's output, so the type that decodes it is the type of the
job the chain *ended* with: its entry type, unless it continued. ``Attempt.blocker_output``
and ``Attempt.blocker_outputs`` read the blockers and call :func:`outputs_of`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from jobchain.entities import Chain, JobStatus
from jobchain.errors import ChainCancelledError, ChainFailedError, InvalidArgumentError
from jobchain.job_types import JobType
from jobchain.worker.waits import waited_chain_ids


def chain_id_of(chain: object) -> str:
    """The id of a ``Chain``, ``ChainStarted`` or chain id string (validated)."""
    [chain_id] = waited_chain_ids([chain])
    return chain_id


def outputs_of(
    blockers: Sequence[Chain], job_type: JobType[Any, Any], *, chain_id: str | None = None
) -> list[Any]:
    """The decoded outputs of the blocker chains that ended with ``job_type``, in blocker order.

    With ``chain_id`` only that blocker, which must have ended with ``job_type``. Raises
    InvalidArgumentError when ``chain_id`` is not a blocker or ended with another type, and
    ChainFailedError / ChainCancelledError for a chosen blocker that did not complete (only a
    job of a ``runs_after_failed_blockers`` type runs with one).
    """
    if chain_id is not None:
        chosen = [chain for chain in blockers if chain.id == chain_id]
        if not chosen:
            raise InvalidArgumentError(
                f"chain {chain_id} is not a blocker of this job; its blockers: {_describe(blockers)}"
            )
        if chosen[0].last.type_name != job_type.name:
            raise InvalidArgumentError(
                f"blocker chain {chain_id} ended with a {chosen[0].last.type_name!r} job, not "
                f"{job_type.name!r}; pass the type its output belongs to"
            )
    else:
        chosen = [chain for chain in blockers if chain.last.type_name == job_type.name]
    return [_decode(chain, job_type) for chain in chosen]


def one_output(blockers: Sequence[Chain], job_type: JobType[Any, Any]) -> Any:
    """The output of the one blocker chain that ended with ``job_type`` (see ``outputs_of``)."""
    matching = [chain for chain in blockers if chain.last.type_name == job_type.name]
    if not matching:
        raise InvalidArgumentError(
            f"no blocker chain of this job ended with a {job_type.name!r} job (a chain's output "
            f"is its last job's); its blockers: {_describe(blockers)}"
        )
    if len(matching) > 1:
        ids = ", ".join(chain.id for chain in matching)
        raise InvalidArgumentError(
            f"{len(matching)} blocker chains ended with a {job_type.name!r} job ({ids}); pass "
            "chain= to choose one, or use blocker_outputs() for all of them"
        )
    return _decode(matching[0], job_type)


def _decode(chain: Chain, job_type: JobType[Any, Any]) -> Any:
    last = chain.last
    if last.status is JobStatus.COMPLETED:
        return job_type.decode_output(last.output)
    if last.status is JobStatus.FAILED:
        raise ChainFailedError(chain.id, last, last.last_attempt_error)
    if last.status is JobStatus.CANCELLED:
        raise ChainCancelledError(chain.id, last, last.cancel_reason)
    raise InvalidArgumentError(f"blocker chain {chain.id} is {last.status.value}: it has no output yet")


def _describe(blockers: Sequence[Chain]) -> str:
    if not blockers:
        return "(none)"
    return ", ".join(
        f"{chain.id} ({chain.type_name} ended with {chain.last.type_name})" for chain in blockers
    )
