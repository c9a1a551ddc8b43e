"""The client: start, complete, trigger, cancel, retry, delete, query and await chains.

Every write runs inside the caller's transaction (``async with client.transaction() as
tx``) and is validated before the first statement, so bad input writes nothing. The
notifications and events a write causes are buffered in ``tx.hooks`` and delivered only
after the transaction commits.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Generic, Literal, TypeVar

from jobchain.client_controls import ClientControls
from jobchain.client_lifecycle import ChainsCancelReport, ChainsRetried, ClientLifecycle
from jobchain.client_queries import Clock, TypeRef
from jobchain.completion import (
    Completion,
    blocker_ids,
    buffer_created,
    check_schedule,
    create_observed,
    resolve_blockers,
)
from jobchain.contracts.notify import AnnouncesWithinState, NotifyAdapter
from jobchain.contracts.observe import Observer, ObservesAttempts, ObservesJobCreation
from jobchain.contracts.state import (
    MAX_PAGE_SIZE,
    ChainGet,
    ChainsDelete,
    ChainsList,
    JobsCreate,
    JobsTrigger,
    NewJob,
    RunsOperationsAlone,
    StateAdapter,
)
from jobchain.end_hooks import EndHookWakes
from jobchain.entities import (
    Chain,
    Deduplication,
    Job,
    JobStatus,
    Schedule,
    _use_slot_setting_init,
    new_ids,
    validate_id,
    validate_ordering_key,
    validate_priority,
)
from jobchain.errors import (
    BlockerReferenceError,
    ChainNotFoundError,
    DuplicateJobIdError,
    InvalidArgumentError,
    JobNotFoundError,
    JobNotTriggerableError,
)
from jobchain.job_types import JobType, JobTypes
from jobchain.joined import JoinedFlushes
from jobchain.transactions import Transaction, TransactionHooks

I = TypeVar("I")  # noqa: E741 -- conventional input type variable name


@dataclass(frozen=True, slots=True, kw_only=True)
class ChainStart(Generic[I]):
    """One chain to start with :meth:`Client.start_chains`.

    ``priority`` None: the job type's default. ``ordering_key``: see :meth:`Client.start_chain`.
    mypy refuses a ``job_type`` that is not an entry type, as for ``start_chain``.
    """

    job_type: JobType[I, Any, Any, Literal[True]]
    input: I
    id: str | None = None
    deduplication: Deduplication | None = None
    schedule: Schedule | None = None
    blockers: Sequence[Chain | str] = ()
    priority: int | None = None
    ordering_key: str | None = None


@dataclass(frozen=True, slots=True)
class ChainStarted:
    """The started chain, or the existing one when ``deduplicated`` is True.

    ``ordered_after``: for a new chain started with an ``ordering_key``, the key's previous
    chain (it runs after that one is terminal), or None when it is the key's first chain.
    """

    chain: Chain
    deduplicated: bool = False
    ordered_after: str | None = field(default=None, kw_only=True)

    @property
    def id(self) -> str:
        return self.chain.id


_use_slot_setting_init(ChainStart)
_use_slot_setting_init(ChainStarted)


_PLAIN_LISTS = (tuple, list)


class Client(ClientLifecycle, ClientControls):
    """Starts, completes, triggers, cancels, retries, deletes, queries and awaits chains.

    ``state`` and ``notify`` are opened adapters (``notify=None``: waiters and workers
    poll); ``job_types`` is the merged registry; ``observers`` receive events after commit;
    ``clock`` (tests) supplies ``now`` for every write. Use :func:`connect` to build one
    from URLs. ``close()`` closes notify, then state.
    """

    def __init__(
        self,
        state: StateAdapter,
        notify: NotifyAdapter | None,
        job_types: JobTypes,
        observers: Sequence[Observer] = (),
        clock: Clock | None = None,
    ) -> None:
        super().__init__(state, notify, job_types, observers, clock)
        # Where the state adapter can announce its new jobs inside the creating transaction
        # (one database for both): no publish after commit for those starts.
        self._announce_on = (
            notify.announce_channel_for(state) if isinstance(notify, AnnouncesWithinState) else None
        )
        self._joined = JoinedFlushes(state)
        self._abilities_of: tuple[Observer, ...] | None = None
        self._attempt_observers: tuple[ObservesAttempts, ...] = ()
        self._creation_observers: tuple[ObservesJobCreation, ...] = ()
        self._records_events = False
        self._end_hook_wakes = EndHookWakes(job_types)

    @property
    def attempt_observers(self) -> tuple[ObservesAttempts, ...]:
        """The observers with the :class:`ObservesAttempts` ability (usually none)."""
        if self.observers is not self._abilities_of:
            self._find_abilities()
        return self._attempt_observers

    @property
    def creation_observers(self) -> tuple[ObservesJobCreation, ...]:
        """The observers with the :class:`ObservesJobCreation` ability (usually none)."""
        if self.observers is not self._abilities_of:
            self._find_abilities()
        return self._creation_observers

    @property
    def records_transaction_events(self) -> bool:
        """Whether transactions build events: some observer reads them (see ``transaction_events``)."""
        if self.observers is not self._abilities_of:
            self._find_abilities()
        return self._records_events

    def _find_abilities(self) -> None:
        # Once per observer set (``observers`` may be replaced, e.g. by jobchain.telemetry's
        # instrument()): the per-job paths then test a tuple, never isinstance.
        observers = self.observers
        self._attempt_observers = tuple(o for o in observers if isinstance(o, ObservesAttempts))
        self._creation_observers = tuple(o for o in observers if isinstance(o, ObservesJobCreation))
        self._records_events = any(getattr(o, "transaction_events", True) for o in observers)
        self._abilities_of = observers

    # ------------------------------------------------------------ lifecycle

    @asynccontextmanager
    async def transaction(
        self, *, connection: object | None = None, autocommit: bool = False
    ) -> AsyncIterator[Transaction]:
        """Open a write transaction; hooks flush after it commits and are dropped on rollback.

        With ``connection`` (your own driver connection or session, already inside a
        transaction) jobchain writes there and does not commit: your commit decides. Its
        notifications then go out after your commit if the backend can observe commits
        (SQLAlchemy sessions can); otherwise call ``await tx.flush()`` after committing —
        until then workers still find the jobs by polling. Forgotten, it logs one WARNING
        per client, and wake-ups of a transaction that started a chain are sent late once
        jobchain sees that chain committed (see ``jobchain.joined``).

        ``autocommit=True`` is for a unit of work that is one operation (say, starting a batch
        of chains): each operation commits on its own as it returns, which saves the BEGIN
        and COMMIT round trips where the backend can (see ``RunsOperationsAlone``; others
        open an ordinary transaction). Two operations in it are two transactions.
        """
        self._check_open()
        if autocommit and connection is not None:
            raise InvalidArgumentError("autocommit cannot join your connection; your commit decides there")
        hooks = TransactionHooks(
            record_events=self.records_transaction_events, end_hooks=self._end_hook_wakes
        )
        tx: Transaction | None = None
        state = self.state
        opened = (
            state.autocommit()
            if autocommit and isinstance(state, RunsOperationsAlone)
            else state.transaction(connection=connection)
        )
        try:
            async with opened as state_tx:
                tx = Transaction(state_tx, hooks, self)
                yield tx
                tx.close()
        except BaseException:
            if tx is not None:
                tx.close()
            hooks.discard()
            raise
        assert tx is not None

        async def flush() -> None:
            await hooks.flush(self.notify, self.observers)

        if connection is None:
            await flush()
            return
        register = getattr(self.state, "after_commit", None)
        if register is None or not register(connection, flush, hooks.discard):
            if hooks.pending(notify=self.notify is not None):
                self._joined.track(tx, connection, flush)
            else:
                tx.defer_flush(flush)

    async def close(self) -> None:
        """Close the notify adapter, then the state adapter (idempotent)."""
        if self._closed:
            return
        self._closed = True
        if self._unwatch_delivery is not None:
            self._unwatch_delivery()
        try:
            await self._joined.close()  # before notify closes: it may still send late wake-ups
            if self.notify is not None:
                await self.notify.close()
        finally:
            await self.state.close()

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    # ------------------------------------------------------------ start

    async def start_chain(
        self,
        tx: Transaction,
        job_type: JobType[I, Any, Any, Literal[True]],
        input: I,
        *,
        id: str | None = None,
        deduplication: Deduplication | None = None,
        schedule: Schedule | None = None,
        blockers: Sequence[Chain | str] = (),
        priority: int | None = None,
        ordering_key: str | None = None,
    ) -> ChainStarted:
        """Start a chain of the entry type ``job_type`` with ``input``.

        mypy refuses a ``job_type`` defined without ``entry=True`` (``Literal[True]`` in its
        type) and an ``input`` that is not its input type.

        With ``deduplication`` an existing matching chain is returned instead
        (``deduplicated=True``). ``blockers`` keep the first job ``blocked`` until those
        chains complete; if one fails or is cancelled (even before this call), the job fails
        with it unless its type was defined with ``runs_after_failed_blockers=True``.
        ``priority`` (-100..100, higher is claimed first) overrides the type's default for
        this first job only. Chains started with the same ``ordering_key`` run one at a time
        in start order: the new chain waits for the key's previous chain to be terminal
        (``ordered_after``), whatever its status. Raises JobTypeValidationError,
        InvalidJobIdError, DuplicateJobIdError, ChainNotFoundError (a missing blocker),
        InvalidArgumentError (priority, ordering key) before writing.
        """
        start = ChainStart(
            job_type=job_type,
            input=input,
            id=id,
            deduplication=deduplication,
            schedule=schedule,
            blockers=blockers,
            priority=priority,
            ordering_key=ordering_key,
        )
        [started] = await self.start_chains(tx, [start])
        return started

    async def start_chains(self, tx: Transaction, starts: Sequence[ChainStart[Any]]) -> list[ChainStarted]:
        """Start several chains in one round trip; results keep the input order."""
        tx = self._tx(tx)
        if isinstance(starts, ChainStart) or not isinstance(starts, Sequence):
            raise InvalidArgumentError("start_chains takes a list of ChainStart(...) items")
        if not starts:
            return []
        jobs = self._new_roots(starts)
        explicit = [s.id for s in starts if s.id is not None]
        if len(set(explicit)) != len(explicit):
            dup = next(i for i in explicit if explicit.count(i) > 1)
            raise DuplicateJobIdError(dup)
        wanted = list(dict.fromkeys(b for job in jobs for b in job.blocker_chain_ids))
        if wanted:
            chains = await resolve_blockers(tx.state, wanted)
            for job in jobs:
                job_type = self.job_types.get(job.type_name)
                self.job_types.check_blockers(job_type, [chains[b].type_name for b in job.blocker_chain_ids])
        else:
            chains = {}
        params = JobsCreate(jobs=jobs, now=self._now(), announce_on=self._announce_on)
        observing = self.creation_observers
        if observing:
            created = await create_observed(tx.state, params, observing, chains, None)
        else:
            created = await tx.state.jobs_create(params)
        existing = await self._existing_chains(tx, [c.job.chain_id for c in created if c.deduplicated])
        hooks = tx.hooks
        new_root = next((c.job for c in created if not c.deduplicated), None)
        if new_root is not None:
            hooks.witness(new_root.id)  # finding it later proves a joined transaction committed
        if not hooks.records_events:
            # Nobody observes: the only side effect is a wake-up per type, buffered once per
            # type with the batch's count (what one call per job adds up to).
            scheduled: dict[str, int] = {}
            results: list[ChainStarted] = []
            for item in created:
                root = item.job
                if item.deduplicated:
                    results.append(ChainStarted(existing[root.chain_id], deduplicated=True))
                    continue
                if root.status is JobStatus.PENDING:
                    if not item.announced:
                        scheduled[root.type_name] = scheduled.get(root.type_name, 0) + 1
                elif root.status is JobStatus.FAILED:  # a blocker chain had already failed
                    hooks.chain_completed(root.chain_id)
                results.append(ChainStarted(Chain(root, root), ordered_after=item.ordered_after))
            for type_name, count in scheduled.items():
                hooks.job_scheduled(type_name, count)
            return results
        results = []
        for item in created:
            if item.deduplicated:
                results.append(ChainStarted(existing[item.job.chain_id], deduplicated=True))
            else:
                buffer_created(hooks, item, new_chain=True)
                chain = Chain(root=item.job, last=item.job)
                results.append(ChainStarted(chain, ordered_after=item.ordered_after))
        return results

    def _new_roots(self, starts: Sequence[ChainStart[Any]]) -> list[NewJob]:
        """The first jobs of ``starts``, validated item by item in order (the first error wins).

        What depends only on the job type (registered, an entry type, accepts a None input)
        is checked once per type of the batch: a batch usually repeats one or a few types.
        """
        registry = self.job_types
        types: dict[object, JobType[Any, Any]] = {}  # the caller's type reference -> checked type
        takes_none: set[JobType[Any, Any]] = set()  # types whose input None encoded to None
        fresh = iter(new_ids(sum(1 for s in starts if isinstance(s, ChainStart) and s.id is None)))
        jobs: list[NewJob] = []
        for start in starts:
            if not isinstance(start, ChainStart):
                raise InvalidArgumentError(f"start_chains takes ChainStart(...) items, got {start!r}")
            ref = start.job_type
            cacheable = isinstance(ref, (JobType, str))  # hashable; resolving it is deterministic
            job_type = types.get(ref) if cacheable else None
            if job_type is None:
                job_type = registry.resolve(ref)
                registry.check_entry(job_type)
                if cacheable:
                    types[ref] = job_type
            value = start.input
            if value is None and job_type in takes_none:
                encoded = None
            else:
                encoded = job_type.encode_input(value)
                if value is None:
                    takes_none.add(job_type)
            deduplication = start.deduplication
            if deduplication is not None and not isinstance(deduplication, Deduplication):
                raise InvalidArgumentError(
                    f"deduplication must be Deduplication(key=..., scope=...), got {deduplication!r}"
                )
            blockers = start.blockers
            # No blockers, nothing to check: check_blockers passes an empty list for any type.
            blocker_chain_ids = (
                [] if not blockers and type(blockers) in _PLAIN_LISTS else blocker_ids(blockers)
            )
            schedule = start.schedule
            priority = start.priority
            ordering_key = start.ordering_key
            jobs.append(
                NewJob(
                    id=validate_id(start.id) if start.id is not None else next(fresh),
                    type_name=job_type.name,
                    chain_type_name=job_type.name,
                    input=encoded,
                    deduplication=deduplication,
                    schedule=schedule if schedule is None else check_schedule(schedule),
                    blocker_chain_ids=blocker_chain_ids,
                    runs_after_failed_blockers=job_type.runs_after_failed_blockers,
                    priority=job_type.priority if priority is None else validate_priority(priority),
                    ordering_key=None if ordering_key is None else validate_ordering_key(ordering_key),
                )
            )
        return jobs

    async def _existing_chains(self, tx: Transaction, chain_ids: list[str]) -> dict[str, Chain]:
        unique = list(dict.fromkeys(chain_ids))
        if not unique:
            return {}
        found: dict[str, Chain] = {}
        # One read per page: a batch may deduplicate onto more chains than a page holds.
        for offset in range(0, len(unique), MAX_PAGE_SIZE):
            ids = unique[offset : offset + MAX_PAGE_SIZE]
            page = await tx.state.chains_list(ChainsList(chain_ids=ids, limit=len(ids)))
            found.update((chain.id, chain) for chain in page.items)
        return found

    # ------------------------------------------------------------ workerless completion

    async def complete_chain(
        self,
        tx: Transaction,
        job_type: TypeRef,
        chain_id: str,
        handler: Callable[[Completion[Any, Any, Any]], Awaitable[object]],
    ) -> Chain:
        """Finish a chain's current job without a worker and return the re-read chain.

        The chain's last job is locked, then ``handler`` receives a :class:`Completion`
        for it and may ``complete(output)``, ``continue_with(...)`` or do nothing. If a
        worker was running the job, it is told it lost ownership. Raises
        ChainNotFoundError, JobTypeMismatchError (``job_type`` is not the chain's type) and,
        from ``complete``/``continue_with``, JobAlreadyCompletedError or, for a failed or
        cancelled chain, JobFinishedError (retry it first), before writing anything.
        """
        tx = self._tx(tx)
        expected = self.job_types.resolve(job_type).name
        chain_id = validate_id(chain_id)
        chain = await tx.state.chain_get(ChainGet(chain_id=chain_id, lock=True))
        if chain is None:
            raise ChainNotFoundError(chain_id)
        self._check_type(expected, chain.type_name)
        completion: Completion[Any, Any, Any] = Completion(tx, chain.last, self.job_types, now=self._now())
        await handler(completion)
        reread = await tx.state.chain_get(ChainGet(chain_id=chain_id))
        if reread is None:
            raise ChainNotFoundError(chain_id)
        return reread

    # ------------------------------------------------------------ trigger

    async def trigger_job(self, tx: Transaction, job_id: str) -> Job:
        """Make a pending (scheduled) job eligible now."""
        [job] = await self.trigger_jobs(tx, [job_id])
        return job

    async def trigger_jobs(self, tx: Transaction, job_ids: Sequence[str]) -> list[Job]:
        """Make pending jobs eligible now, all or nothing; results keep the input order.

        Raises JobNotFoundError for the first missing id or JobNotTriggerableError for the
        first job that is not pending, and then changes nothing.
        """
        tx = self._tx(tx)
        if isinstance(job_ids, str) or not isinstance(job_ids, Sequence):
            raise InvalidArgumentError(f"job_ids must be a list of job ids, got {job_ids!r}")
        ids = [validate_id(i) for i in job_ids]
        if not ids:
            return []
        result = await tx.state.jobs_trigger(JobsTrigger(job_ids=ids, now=self._now()))
        missing = set(result.not_found)
        stuck = dict(result.not_triggerable)
        for job_id in ids:
            if job_id in missing:
                raise JobNotFoundError(job_id)
            if job_id in stuck:
                raise JobNotTriggerableError(job_id, stuck[job_id])
        for job in result.triggered:
            tx.hooks.job_scheduled(job.type_name)
            tx.hooks.event(
                "job_triggered",
                job_id=job.id,
                type_name=job.type_name,
                chain_id=job.chain_id,
                chain_type_name=job.chain_type_name,
            )
        return result.triggered

    # ------------------------------------------------------------ delete

    async def delete_chain(self, tx: Transaction, chain_id: str, *, cascade: bool = False) -> Chain | None:
        """Delete one chain; returns it, or None if it did not exist."""
        chain_id = validate_id(chain_id)
        deleted = await self.delete_chains(tx, [chain_id], cascade=cascade)
        return next((c for c in deleted if c.id == chain_id), None)

    async def delete_chains(
        self, tx: Transaction, chain_ids: Sequence[str], *, cascade: bool = False
    ) -> list[Chain]:
        """Delete chains with all their jobs; missing ids are skipped.

        Raises BlockerReferenceError (deleting nothing) if a chain still blocks a job
        outside the set; ``cascade=True`` also deletes, recursively, the chains that block
        jobs of the set. Workers running a deleted job are told to stop.
        """
        tx = self._tx(tx)
        if isinstance(chain_ids, str) or not isinstance(chain_ids, Sequence):
            raise InvalidArgumentError(f"chain_ids must be a list of chain ids, got {chain_ids!r}")
        if not isinstance(cascade, bool):
            raise InvalidArgumentError(f"cascade must be True or False, got {cascade!r}")
        ids = list(dict.fromkeys(validate_id(i) for i in chain_ids))
        if not ids:
            return []
        result = await tx.state.chains_delete(ChainsDelete(chain_ids=ids, cascade=cascade))
        if result.blocker_references:
            raise BlockerReferenceError(result.blocker_references)
        for job_id in result.running_job_ids:
            tx.hooks.ownership_lost(job_id)
        for chain in result.chains:
            tx.hooks.event("chain_deleted", chain_id=chain.id, chain_type_name=chain.type_name)
        return result.chains


async def connect(
    state_url: str | StateAdapter | None = None,
    *,
    notify: str | NotifyAdapter | None = None,
    job_types: JobTypes,
    observers: Sequence[Observer] | None = None,
    clock: Clock | None = None,
    migrate: bool | None = None,
) -> Client:
    """Open the backends named by URLs (or environment variables) and return a Client.

    ``state_url``: ``sqlite:///path``, ``postgresql://...``, ``memory://``; None reads
    ``JOBCHAIN_STATE_URL`` and defaults to the embedded SQLite file. ``notify``: a URL,
    ``none``, or None to read ``JOBCHAIN_NOTIFY_URL`` (unset: no notify, workers poll).
    Opened adapters may also be passed directly. ``observers`` defaults to those the
    installed plugins provide (``jobchain_observers`` hook). ``migrate``: create or upgrade
    the tables first; by default only for the embedded default, which must work with no
    setup (run ``jobchain migrate`` as a deploy step for real databases).
    """
    if not isinstance(job_types, JobTypes):
        raise InvalidArgumentError(f"job_types must be a JobTypes registry, got {job_types!r}")
    # Imported here so the client module does not load the plugin machinery until needed.
    from jobchain.connect_backends import open_notify, open_state, state_url_configured
    from jobchain.plugins.manager import collect_observers

    if migrate is None:
        migrate = state_url is None and not state_url_configured()
    if observers is None:
        observers = collect_observers()
    state = state_url if isinstance(state_url, StateAdapter) else await open_state(state_url)
    try:
        if migrate:
            await state.migrate()
        notify_adapter = notify if isinstance(notify, NotifyAdapter) else await open_notify(notify)
        return Client(state, notify_adapter, job_types, observers=observers, clock=clock)
    except BaseException:
        if not isinstance(state_url, StateAdapter):
            await state.close()
        raise


__all__ = ["ChainStart", "ChainStarted", "ChainsCancelReport", "ChainsRetried", "Client", "connect"]
