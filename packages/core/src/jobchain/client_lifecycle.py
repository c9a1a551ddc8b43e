"""The client's lifecycle side: cancel chains, redrive failed or cancelled jobs, list dead letters.

Every write validates its input before the first statement and is all-or-nothing: a refused
id raises a typed error and nothing is written. Notifications and events are buffered in the
transaction's hooks and go out only after commit:

* cancelling publishes ownership-lost for each job that was running (its worker aborts with
  reason ``cancelled``), chain-finished (the "chain completed" channel) for every cancelled
  chain and every chain failed by propagation, and job-scheduled for jobs that became pending;
* retrying publishes job-scheduled for each retried job that is pending again.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime

from jobchain.client_queries import ClientQueries, TypeRef, _aware, _names, _require_list, error_type_names
from jobchain.completion import buffer_propagation, check_schedule, job_attrs
from jobchain.contracts.state import (
    DEFAULT_PAGE_SIZE,
    MAX_PAGE_SIZE,
    ChainsCancel,
    ChainsCancelled,
    ChainsList,
    JobGet,
    JobsList,
    JobsRetried,
    JobsRetry,
    Order,
    StateTx,
)
from jobchain.entities import MAX_ERROR_MESSAGE_CHARS, Chain, Job, JobStatus, Page, Schedule, validate_id
from jobchain.errors import (
    ChainNotCancellableError,
    ChainNotFoundError,
    InvalidArgumentError,
    JobNotFoundError,
    JobNotRetryableError,
)
from jobchain.transactions import Transaction, TransactionHooks

RETRYABLE_STATUSES = (JobStatus.FAILED, JobStatus.CANCELLED)
"""The statuses :meth:`ClientLifecycle.retry_jobs` accepts."""

MAX_REASON_CHARS = MAX_ERROR_MESSAGE_CHARS
"""The longest cancel reason accepted (the bound of an error message)."""

DEFAULT_RETRY_CHAINS_LIMIT = 1_000
"""How many chains one :meth:`ClientLifecycle.retry_chains` call retries at most by default."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ChainsCancelReport:
    """What :meth:`ClientLifecycle.cancel_chains_cascading` did (or, ``dry_run``, would do).

    ``cancelled``: the named chains' last jobs, in request order. ``cascaded``: the last jobs
    of the chains the cascade added (blockers of the set, recursively), oldest chain first.
    ``shared``: ids of the blocker chains left out because a chain outside the set waits for
    them too, oldest first (what only they wait for is left out too, and not listed).
    ``failed``: jobs failed by propagation. ``running_job_ids``: the cancelled jobs that were
    running (their workers are told, unless ``dry_run``). Each job as it is after the cancel.
    """

    cancelled: list[Job] = field(default_factory=list)
    cascaded: list[Job] = field(default_factory=list)
    shared: list[str] = field(default_factory=list)
    failed: list[Job] = field(default_factory=list)
    running_job_ids: list[str] = field(default_factory=list)
    dry_run: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class ChainsRetried:
    """What :meth:`ClientLifecycle.retry_chains` did.

    ``retried``: the retried jobs (each a chain's last job, now ``pending``, or ``blocked``
    while a blocker chain is unfinished), oldest first. ``reblocked``: jobs that had failed
    because of a retried chain and went back to ``blocked`` with it. ``has_more``: the call
    stopped at its ``limit`` while more matching chains may remain; call again (in a new
    transaction) to continue.
    """

    retried: list[Job] = field(default_factory=list)
    reblocked: list[Job] = field(default_factory=list)
    has_more: bool = False


def _reason(reason: object) -> str | None:
    if reason is None:
        return None
    if not isinstance(reason, str):
        raise InvalidArgumentError(f"reason must be a string or None, got {reason!r}")
    if len(reason) > MAX_REASON_CHARS:
        raise InvalidArgumentError(
            f"reason must be at most {MAX_REASON_CHARS} characters, got {len(reason)}; keep details elsewhere"
        )
    return reason


def _retry_statuses(values: Sequence[JobStatus | str]) -> list[str]:
    _require_list("statuses", values)
    allowed = {s.value for s in RETRYABLE_STATUSES}
    checked = [str(v.value if isinstance(v, JobStatus) else v) for v in values]
    if not checked or any(v not in allowed for v in checked):
        raise InvalidArgumentError(
            f"statuses must be a non-empty list of 'failed' and/or 'cancelled', got {list(values)!r}"
        )
    return list(dict.fromkeys(checked))


def _unique_ids(what: str, values: Sequence[str]) -> list[str]:
    _require_list(what, values)
    return list(dict.fromkeys(validate_id(v) for v in values))


async def _read_chains(state: StateTx, ids: Sequence[str]) -> dict[str, Chain]:
    found: dict[str, Chain] = {}
    for start in range(0, len(ids), MAX_PAGE_SIZE):
        part = list(ids[start : start + MAX_PAGE_SIZE])
        page = await state.chains_list(ChainsList(chain_ids=part, limit=len(part)))
        found.update((chain.id, chain) for chain in page.items)
    return found


def _buffer_retried(hooks: TransactionHooks, result: JobsRetried) -> None:
    events = hooks.records_events
    for job in result.retried:
        if job.status is JobStatus.PENDING:
            hooks.job_scheduled(job.type_name)
        if events:
            hooks.event("job_retried", **job_attrs(job), status=job.status.value)
    if events:
        for job in result.reblocked:
            hooks.event("job_reblocked", **job_attrs(job))


class ClientLifecycle(ClientQueries):
    """Lifecycle methods of :class:`~jobchain.client.Client` (see that class)."""

    # ------------------------------------------------------------ cancel

    async def cancel_chain(
        self,
        tx: Transaction,
        chain_id: str,
        *,
        reason: str | None = None,
        cascade: bool = False,
        include_shared: bool = False,
        dry_run: bool = False,
    ) -> Chain:
        """Cancel one chain and return it (now ``cancelled``); see :meth:`cancel_chains`."""
        [chain] = await self.cancel_chains(
            tx, [chain_id], reason=reason, cascade=cascade, include_shared=include_shared, dry_run=dry_run
        )
        return chain

    async def cancel_chains(
        self,
        tx: Transaction,
        chain_ids: Sequence[str],
        *,
        reason: str | None = None,
        cascade: bool = False,
        include_shared: bool = False,
        dry_run: bool = False,
    ) -> list[Chain]:
        """Cancel chains, all or nothing; results keep the input order (repeated ids once).

        Each chain's last job, if blocked, pending or running, becomes ``cancelled`` with
        ``cancelled_at`` and ``reason``; its history (earlier jobs, attempts, errors) stays.
        A running job's worker is told at once (its abort signal fires with reason
        ``cancelled``) and whatever that attempt writes later is refused. Jobs blocked by a
        cancelled chain fail with it unless their type runs after failed blockers.
        Raises ChainNotFoundError or ChainNotCancellableError (a completed, failed or
        cancelled chain; the error carries its ``status``) for the first refused id, and then
        changes nothing.

        ``cascade=True`` also cancels the chains these wait for (the blockers of their jobs,
        declared or added by a handler's wait), recursively, leaving out a blocker that a
        chain outside the set waits for too (and what only it would pull in) unless
        ``include_shared=True``; finished blockers are skipped. The result lists the named
        chains only: :meth:`cancel_chains_cascading` also says which chains the cascade took
        and which it left out. ``dry_run=True`` returns the chains as they would be and
        changes nothing (no worker is told, nothing is published).
        """
        outcome = await self._cancel(tx, chain_ids, reason, cascade, include_shared, dry_run)
        if outcome is None:
            return []
        ids, result = outcome
        last_by_chain = {job.chain_id: job for job in result.cancelled}
        others = [c for c in ids if c in last_by_chain and not last_by_chain[c].is_root]
        roots = await _read_chains(self._tx(tx).state, others) if others else {}
        out: list[Chain] = []
        for chain_id in ids:
            if chain_id in last_by_chain:
                job = last_by_chain[chain_id]
                out.append(Chain(root=roots[chain_id].root if chain_id in roots else job, last=job))
        return out

    async def cancel_chains_cascading(
        self,
        tx: Transaction,
        chain_ids: Sequence[str],
        *,
        reason: str | None = None,
        include_shared: bool = False,
        dry_run: bool = False,
    ) -> ChainsCancelReport:
        """:meth:`cancel_chains` with ``cascade=True``, returning what was cancelled: the named
        chains, the chains the cascade added and the ones it left out because shared (see
        :class:`ChainsCancelReport`). Same refusals and notifications."""
        outcome = await self._cancel(tx, chain_ids, reason, True, include_shared, dry_run)
        if outcome is None:
            return ChainsCancelReport(dry_run=dry_run)
        _, result = outcome
        return ChainsCancelReport(
            cancelled=result.cancelled,
            cascaded=result.cascaded,
            shared=result.shared,
            failed=result.failed_jobs,
            running_job_ids=result.running_job_ids,
            dry_run=dry_run,
        )

    async def _cancel(
        self,
        tx: Transaction,
        chain_ids: Sequence[str],
        reason: str | None,
        cascade: bool,
        include_shared: bool,
        dry_run: bool,
    ) -> tuple[list[str], ChainsCancelled] | None:
        """Validate, cancel, raise for a refusal, buffer the side effects (none for a dry run)."""
        tx = self._tx(tx)
        ids = _unique_ids("chain_ids", chain_ids)
        reason = _reason(reason)
        for name, value in (("cascade", cascade), ("include_shared", include_shared), ("dry_run", dry_run)):
            if not isinstance(value, bool):
                raise InvalidArgumentError(f"{name} must be True or False, got {value!r}")
        if not ids:
            return None
        result = await tx.state.chains_cancel(
            ChainsCancel(
                chain_ids=ids,
                reason=reason,
                now=self._now(),
                cascade=cascade,
                include_shared=include_shared,
                dry_run=dry_run,
            )
        )
        missing = set(result.not_found)
        finished = dict(result.not_cancellable)
        for chain_id in ids:
            if chain_id in missing:
                raise ChainNotFoundError(chain_id)
            if chain_id in finished:
                raise ChainNotCancellableError(chain_id, finished[chain_id])
        if dry_run:
            return ids, result
        hooks = tx.hooks
        for job_id in result.running_job_ids:
            hooks.ownership_lost(job_id)
        running = set(result.running_job_ids)
        for job in (*result.cancelled, *result.cascaded):
            hooks.chain_completed(job.chain_id)  # the channel means "chain finished"
            hooks.job_ended(job)
            if hooks.records_events:
                attrs = job_attrs(job)
                hooks.event("job_cancelled", **attrs, reason=reason, was_running=job.id in running)
                hooks.event(
                    "chain_cancelled",
                    chain_id=job.chain_id,
                    chain_type_name=job.chain_type_name,
                    reason=reason,
                )
        buffer_propagation(hooks, result.failed_jobs, result.unblocked_jobs)
        return ids, result

    # ------------------------------------------------------------ redrive

    async def retry_job(self, tx: Transaction, job_id: str, *, schedule: Schedule | None = None) -> Job:
        """Redrive one failed or cancelled job and return it; see :meth:`retry_jobs`."""
        [job] = await self.retry_jobs(tx, [job_id], schedule=schedule)
        return job

    async def retry_jobs(
        self, tx: Transaction, job_ids: Sequence[str], *, schedule: Schedule | None = None
    ) -> list[Job]:
        """Redrive failed or cancelled jobs, all or nothing; results keep the input order
        (repeated ids once).

        Each job goes back to ``pending`` at ``schedule`` (None: now), or to ``blocked`` while
        one of its blocker chains is unfinished, with a fresh attempt budget; its attempt
        count and error history stay. Jobs that failed because of a retried job's chain go
        back to ``blocked`` with it (recursively) and run once it completes.
        Raises JobNotFoundError, or JobNotRetryableError for a job that is not failed or
        cancelled (``status``) or that failed because its blocker chain is still failed or
        cancelled (``blocked_by_chain_id``: retry that chain instead), for the first refused
        id, and then changes nothing.
        """
        tx = self._tx(tx)
        ids = _unique_ids("job_ids", job_ids)
        schedule = check_schedule(schedule)
        if not ids:
            return []
        result = await tx.state.jobs_retry(JobsRetry(job_ids=ids, schedule=schedule, now=self._now()))
        missing = set(result.not_found)
        refused = dict(result.not_retryable)
        blocked = dict(result.blocked_by_failed)
        for job_id in ids:
            if job_id in missing:
                raise JobNotFoundError(job_id)
            if job_id in refused:
                raise JobNotRetryableError(job_id, refused[job_id])
            if job_id in blocked:
                # The refusal names the blocker, not the job's status (failed or cancelled).
                job = await tx.state.job_get(JobGet(job_id=job_id))
                status = job.status.value if job is not None else JobStatus.FAILED.value
                raise JobNotRetryableError(job_id, status, blocked_by_chain_id=blocked[job_id])
        _buffer_retried(tx.hooks, result)
        by_id = {job.id: job for job in result.retried}
        return [by_id[i] for i in ids if i in by_id]

    async def retry_chains(
        self,
        tx: Transaction,
        *,
        type_names: Sequence[TypeRef] = (),
        chain_type_names: Sequence[TypeRef] = (),
        statuses: Sequence[JobStatus | str] = RETRYABLE_STATUSES,
        error_types: Sequence[str] = (),
        created_from: datetime | None = None,
        created_to: datetime | None = None,
        schedule: Schedule | None = None,
        limit: int = DEFAULT_RETRY_CHAINS_LIMIT,
    ) -> ChainsRetried:
        """Redrive every failed or cancelled chain matching the filters, oldest first.

        The filters are those of :meth:`list_dead_letters` and :meth:`list_jobs`, applied to
        each chain's last job (the failed or cancelled one): ``type_names`` its job type,
        ``chain_type_names`` its chain's type, ``statuses`` failed and/or cancelled (default
        both), ``error_types`` the type of its last recorded error, ``created_from`` /
        ``created_to`` (inclusive) when it was created. Matching jobs are read and retried a
        page at a time inside ``tx``, as :meth:`retry_jobs` would, up to ``limit`` chains;
        ``has_more`` then says to call again in a new transaction. A job that failed because
        its blocker chain failed is not retried on its own: it goes back to ``blocked`` when
        that chain is retried (listed in ``reblocked``). A job that another transaction
        retried or deleted meanwhile is skipped.
        """
        tx = self._tx(tx)
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise InvalidArgumentError(f"limit must be a positive integer, got {limit!r}")
        params = JobsList(
            type_names=_names("type_names", type_names),
            chain_type_names=_names("chain_type_names", chain_type_names),
            statuses=_retry_statuses(statuses),
            error_types=error_type_names(error_types),
            created_from=_aware("created_from", created_from),
            created_to=_aware("created_to", created_to),
            order="asc",
            limit=min(limit, MAX_PAGE_SIZE),
        )
        schedule = check_schedule(schedule)
        retried: list[Job] = []
        reblocked: list[Job] = []
        cursor: str | None = None
        while True:
            page = await tx.state.jobs_list(_with_cursor(params, cursor))
            # A job failed by its blocker follows that chain's retry (retrying it alone is refused).
            candidates = [job.id for job in page.items if job.failed_by_chain_id is None]
            room = limit - len(retried)
            more_here = len(candidates) > room
            result = await self._retry_available(tx, candidates[:room], schedule)
            retried += result.retried
            reblocked += result.reblocked
            cursor = page.next_cursor
            if more_here or cursor is None:
                return ChainsRetried(retried=retried, reblocked=reblocked, has_more=more_here)
            if len(retried) >= limit:
                return ChainsRetried(retried=retried, reblocked=reblocked, has_more=True)

    async def _retry_available(
        self, tx: Transaction, ids: list[str], schedule: Schedule | None
    ) -> JobsRetried:
        """Retry ``ids``, dropping those another transaction changed meanwhile (all-or-nothing
        refusals write nothing, so the rest is simply retried again)."""
        while ids:
            result = await tx.state.jobs_retry(JobsRetry(job_ids=ids, schedule=schedule, now=self._now()))
            refused = (
                set(result.not_found)
                | {i for i, _ in result.not_retryable}
                | {i for i, _ in result.blocked_by_failed}
            )
            if not refused:
                _buffer_retried(tx.hooks, result)
                return result
            ids = [i for i in ids if i not in refused]
        return JobsRetried()

    # ------------------------------------------------------------ dead letters

    async def list_dead_letters(
        self,
        *,
        type_names: Sequence[TypeRef] = (),
        chain_type_names: Sequence[TypeRef] = (),
        chain_ids: Sequence[str] = (),
        error_types: Sequence[str] = (),
        created_from: datetime | None = None,
        created_to: datetime | None = None,
        order: Order = "desc",
        cursor: str | None = None,
        limit: int = DEFAULT_PAGE_SIZE,
        tx: Transaction | None = None,
    ) -> Page[Job]:
        """Failed jobs (dead letters), newest first by default, with cursor pagination.

        ``type_names`` filters by the failed job's type, ``error_types`` by the type of its
        last recorded error (``"TimeoutError"``, ``"JobTimeoutError"``, ``"FailJob"``,
        ``"BlockerChainFailed"``...); time bounds (the job's creation) are inclusive. Each
        job's ``attempt_errors`` holds its recent error history. Redrive them with
        :meth:`retry_jobs` or, by the same filters, :meth:`retry_chains`.
        """
        return await self.list_jobs(
            type_names=type_names,
            chain_type_names=chain_type_names,
            chain_ids=chain_ids,
            statuses=[JobStatus.FAILED],
            error_types=error_types,
            created_from=created_from,
            created_to=created_to,
            order=order,
            cursor=cursor,
            limit=limit,
            tx=tx,
        )


def _with_cursor(params: JobsList, cursor: str | None) -> JobsList:
    return params if cursor is None else replace(params, cursor=cursor)


__all__ = ["DEFAULT_RETRY_CHAINS_LIMIT", "RETRYABLE_STATUSES", "ChainsRetried", "ClientLifecycle"]
