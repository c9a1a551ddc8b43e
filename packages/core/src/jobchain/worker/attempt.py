"""One attempt at one job: the handler's view (``Attempt``) and its processing modes.

Atomic mode: prepare, handler and complete share one transaction, committed when the
handler returns. Staged mode: prepare commits on its own, the handler runs outside any
transaction while the lease is renewed, and complete runs in a new transaction. Calling
``complete`` before the handler's first other await selects atomic mode; otherwise the
worker sets up staged mode by itself.

The attempt transaction stays open until the handler returns. Any exception (in prepare,
between the phases, in complete, or after ``await attempt.complete(...)``) rolls the whole
open transaction back, so the completion, continuation, unblocking and the user's own
writes vanish together; the job is then rescheduled in a fresh transaction, which works
even when the failed transaction was poisoned. User callbacks run in savepoints so that
code which catches its own database errors can carry on.

Group commit (the worker's ``group_commit``): a plain ``complete(output)`` with no
callback, continuation, middleware or open transaction writes nothing but the completion.
As the handler's first await (atomic mode) it is validated at once and written when the
handler returns, together with the other attempts finishing meanwhile
(:mod:`jobchain.worker.completer`); an exception after such a ``complete`` still means the
job was not completed. In staged mode it is written with a group too, but ``complete``
waits for that group's commit, exactly as it would wait for its own transaction.

A job type's ``timeout`` measures the handler (:mod:`jobchain.worker.deadline`): the
phases' own database work — the transaction ``prepare`` opens and commits, the completion
``complete``/``continue_with``/``wait_for`` writes, the group commit ``complete`` waits for —
runs with the deadline's clock stopped (:meth:`Attempt._untimed`).

``wait_for(*chains)`` ends an attempt the third way: the job waits for chains (usually ones
the handler just started) and its handler runs again, a new attempt, once they all ended
(:meth:`Attempt.wait_for`, :mod:`jobchain.worker.waits`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractContextManager, AsyncExitStack, nullcontext
from dataclasses import dataclass, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any, Generic, Literal, overload

from typing_extensions import TypeVar

from jobchain.contracts import JobBlockersGet, JobGet
from jobchain.entities import Chain, Job, JobStatus, Schedule
from jobchain.errors import InvalidArgumentError, JobchainError
from jobchain.job_types import AnyContinuation
from jobchain.worker.abort import AbortSignal, AttemptAbortedError
from jobchain.worker.failures import now_of
from jobchain.worker.ownership import reason_for
from jobchain.worker.processors import run_wrapped

if TYPE_CHECKING:
    from jobchain.client import ChainStart, ChainStarted, Client
    from jobchain.entities import Deduplication
    from jobchain.job_types import JobType
    from jobchain.transactions import Transaction
    from jobchain.worker.completer import CompletionGroups
    from jobchain.worker.deadline import Deadline
    from jobchain.worker.processors import Processor

I = TypeVar("I")  # noqa: E741 -- conventional input/output type variable names
O = TypeVar("O")  # noqa: E741
I2 = TypeVar("I2")
O2 = TypeVar("O2")
# What the handler may continue with: the job type's ``continues_with`` tuple. The default,
# AnyContinuation (not Any, which would let mypy infer Any for the successor's input), keeps
# ``Attempt[X, Y]`` checking the input of any continuation without checking its type.
N = TypeVar("N", covariant=True, default=AnyContinuation)
# continue_with's overloads: the successor's input, output and own phantom parameters.
_NI = TypeVar("_NI")
_NO = TypeVar("_NO")
_NN = TypeVar("_NN")
_NE = TypeVar("_NE")
Mode = Literal["atomic", "staged"]

_NOTHING: AbstractContextManager[object] = nullcontext()
"""What :meth:`Attempt._untimed` returns without a deadline (reusable: it does nothing)."""


def _still_timed() -> AbstractContextManager[object]:
    """For work the handler does not wait for: the deadline's clock keeps running."""
    return _NOTHING


class AttemptMisuseError(JobchainError):
    """The handler used its attempt wrongly (called a phase twice or out of order)."""


class HandlerDidNotCompleteError(JobchainError):
    """The handler returned without completing, continuing or raising; return attempt.complete(...)."""


@dataclass(frozen=True, slots=True)
class Completed:
    """Returned by ``complete``/``continue_with``/``wait_for``; the handler returns it."""

    job: Job
    continuation: Job | None = None
    waiting_for: tuple[str, ...] = ()
    """After ``wait_for``: the chains the job waits for (its status is then blocked, pending
    or failed, not completed)."""


@dataclass(frozen=True, slots=True)
class Continue:
    """What a synchronous handler returns to continue its chain instead of finishing it."""

    job_type: JobType[Any, Any]
    input: Any
    schedule: Schedule | None = None
    blockers: Sequence[Chain | str] = ()


class Attempt(Generic[I, O, N]):
    """What a handler receives: the job, its decoded input, the abort signal and the phases.

    Annotate a handler ``Attempt[Input, Output]``; add the job type's ``continues_with`` tuple
    as a third parameter (``Attempt[Input, Output, tuple[JobType[A, B], ...]]``) and mypy
    checks its :meth:`continue_with` calls too (docs/reference/job-types.md, "Static typing").
    """

    def __init__(self, client: Client, processor: Processor, job: Job, worker_id: str) -> None:
        self.job = job
        self.worker_id = worker_id
        self.signal = AbortSignal()
        self.context: dict[str, Any] = {}
        self.input: I = processor.job_type.decode_input(job.input)
        self._client = client
        self._processor = processor
        self._mode: Mode | None = None
        self._auto = False
        self._prepared = False
        self._completed: Completed | None = None
        self._tx_stack: AsyncExitStack | None = None
        self._tx: Transaction | None = None
        self.on_staged: Callable[[], Awaitable[None]] | None = None
        self.completion_groups: CompletionGroups | None = None
        self.deadline: Deadline | None = None
        """The handler's deadline (its job type's ``timeout``), set by the worker; None: none."""
        # A plain completion queued for group commit: (encoded output, completion time).
        self._deferred: tuple[Any, datetime] | None = None

    @property
    def mode(self) -> Mode | None:
        return self._mode

    @property
    def client(self) -> Client:
        """The client of the worker running this attempt: query, start or await other chains.

        To start chains, prefer :meth:`start_chain`, which writes in the attempt's own
        transaction when one is open.
        """
        return self._client

    @property
    def transaction(self) -> Transaction | None:
        """The open attempt transaction (atomic mode, or during complete), else None."""
        return self._tx

    async def blockers(self) -> list[Chain]:
        """The job's blocker chains in declaration order (terminal, with their outputs): the
        declared ones, then those it waited for (:meth:`wait_for`). Read in the attempt's
        transaction while one is open (atomic mode)."""
        if self._tx is not None:
            return await self._tx.state.job_blockers_get(JobBlockersGet(job_id=self.job.id))
        async with self._client.state.transaction(read_only=True) as tx:
            return await tx.job_blockers_get(JobBlockersGet(job_id=self.job.id))

    async def blocker_output(
        self, job_type: JobType[Any, O2], *, chain: Chain | ChainStarted | str | None = None
    ) -> O2:
        """The output of the blocker chain that ended with a ``job_type`` job, typed ``O2``.

        A chain's output is its last job's, so ``job_type`` is the type its blocker chain
        ended with: the type it was started with, unless it continued. Several blockers that
        ended with that type: pass ``chain`` (a Chain, ChainStarted or id) to choose one, or
        use :meth:`blocker_outputs`. Raises InvalidArgumentError when no blocker (or several)
        ended with ``job_type``; ChainFailedError / ChainCancelledError for a blocker that did
        not complete (possible only for a ``runs_after_failed_blockers`` type).
        """
        from jobchain.worker.blocker_outputs import chain_id_of, one_output, outputs_of

        registered = self._client.job_types.resolve(job_type)
        blockers = await self.blockers()
        output: O2
        if chain is None:
            output = one_output(blockers, registered)
        else:
            [output] = outputs_of(blockers, registered, chain_id=chain_id_of(chain))
        return output

    async def blocker_outputs(self, job_type: JobType[Any, O2]) -> list[O2]:
        """The outputs of every blocker chain that ended with a ``job_type`` job, in blocker
        order (fan-in); see :meth:`blocker_output` for the errors."""
        from jobchain.worker.blocker_outputs import outputs_of

        registered = self._client.job_types.resolve(job_type)
        return outputs_of(await self.blockers(), registered)

    async def start_chain(
        self,
        job_type: JobType[I2, Any, Any, Literal[True]],
        input: I2,
        *,
        id: str | None = None,
        deduplication: Deduplication | None = None,
        schedule: Schedule | None = None,
        blockers: Sequence[Chain | str] = (),
        priority: int | None = None,
        ordering_key: str | None = None,
    ) -> ChainStarted:
        """Start a chain from the handler (fan-out), with the arguments of ``Client.start_chain``.

        In atomic mode (and inside complete) the chain is written in the attempt's own
        transaction: a failed attempt leaves no chain behind, and ``continue_with(...,
        blockers=[...])`` commits together with it. Otherwise (staged mode) it commits in a
        transaction of its own before this returns, so a retried attempt starts it again:
        pass ``deduplication`` to make that idempotent. Called before the handler chose a mode,
        it selects staged mode, as any other first await does.
        """
        from jobchain.client import ChainStart

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
        [started] = await self.start_chains([start])
        return started

    async def start_chains(self, starts: Sequence[ChainStart[Any]]) -> list[ChainStarted]:
        """Start several chains in one round trip (see :meth:`start_chain`); results keep order."""
        if not self._prepared:
            await self._auto_setup(blocking=True)
        self.signal.raise_if_aborted()
        if self._tx is not None:
            return await self._client.start_chains(self._tx, starts)
        async with self._client.transaction() as tx:
            return await self._client.start_chains(tx, starts)

    async def prepare(
        self, mode: Mode = "staged", callback: Callable[[Transaction], Awaitable[Any]] | None = None
    ) -> Any:
        """Choose the processing mode and optionally run ``callback`` in a savepoint first."""
        return await self._prepare(mode, callback, hold=True)

    async def _prepare(
        self,
        mode: Mode,
        callback: Callable[[Transaction], Awaitable[Any]] | None,
        *,
        hold: bool,
        blocking: bool = True,
    ) -> Any:
        """``blocking``: the handler waits for this (its own call), so its deadline's clock
        stops for the transaction work; not so for the worker's auto-setup, which runs while
        the handler awaits something of its own."""
        if self._prepared:
            reason = "after auto-setup" if self._auto else "twice"
            raise AttemptMisuseError(f"prepare cannot be called {reason}")
        if mode not in ("atomic", "staged"):
            raise InvalidArgumentError(f"mode must be 'atomic' or 'staged', got {mode!r}")
        self._prepared = True
        self._mode = mode
        result: Any = None
        untimed = self._untimed if blocking else _still_timed
        if mode == "atomic" or callback is not None:
            with untimed():
                await self._open_tx()
                if mode == "atomic" and hold:
                    await self._hold_job()
            if callback is not None:
                result = await self._in_savepoint("wrap_prepare", callback)
            else:
                await self._wrap_prepare_without_callback()
            if mode == "staged":
                with untimed():
                    await self._commit_tx()
        else:
            # Staged without a callback opens no transaction; middleware still wraps the phase.
            await self._wrap_prepare_without_callback()
        if mode == "staged" and self.on_staged is not None:
            with untimed():
                await self.on_staged()
        return result

    async def auto_setup(self) -> None:
        """Called by the worker when the handler awaited something before choosing a mode."""
        await self._auto_setup(blocking=False)

    async def _auto_setup(self, *, blocking: bool) -> None:
        if self._prepared:
            return
        self._auto = True
        await self._prepare("staged", None, hold=False, blocking=blocking)

    async def _wrap_prepare_without_callback(self) -> None:
        if not self._processor.middleware:
            return

        async def nothing() -> None:
            return None

        await run_wrapped(self._processor.middleware, "wrap_prepare", self, nothing, self._tx)

    async def complete(
        self, output: O, *, callback: Callable[[Transaction], Awaitable[Any]] | None = None
    ) -> Completed:
        """Finish the job (and its chain, unless continued) with ``output``."""
        return await self._finish(output, None, callback)

    @overload
    async def continue_with(
        self: Attempt[Any, Any, tuple[JobType[_NI, _NO, _NN, _NE], *tuple[Any, ...]]],
        job_type: JobType[_NI, _NO, _NN, _NE],
        input: _NI,
        *,
        schedule: Schedule | None = ...,
        blockers: Sequence[Chain | str] = ...,
        id: str | None = ...,
        callback: Callable[[Transaction], Awaitable[Any]] | None = ...,
    ) -> Completed: ...

    @overload
    async def continue_with(
        self: Attempt[Any, Any, tuple[Any, JobType[_NI, _NO, _NN, _NE], *tuple[Any, ...]]],
        job_type: JobType[_NI, _NO, _NN, _NE],
        input: _NI,
        *,
        schedule: Schedule | None = ...,
        blockers: Sequence[Chain | str] = ...,
        id: str | None = ...,
        callback: Callable[[Transaction], Awaitable[Any]] | None = ...,
    ) -> Completed: ...

    @overload
    async def continue_with(
        self: Attempt[Any, Any, tuple[Any, Any, JobType[_NI, _NO, _NN, _NE], *tuple[Any, ...]]],
        job_type: JobType[_NI, _NO, _NN, _NE],
        input: _NI,
        *,
        schedule: Schedule | None = ...,
        blockers: Sequence[Chain | str] = ...,
        id: str | None = ...,
        callback: Callable[[Transaction], Awaitable[Any]] | None = ...,
    ) -> Completed: ...

    @overload
    async def continue_with(
        self: Attempt[Any, Any, tuple[Any, Any, Any, JobType[_NI, _NO, _NN, _NE], *tuple[Any, ...]]],
        job_type: JobType[_NI, _NO, _NN, _NE],
        input: _NI,
        *,
        schedule: Schedule | None = ...,
        blockers: Sequence[Chain | str] = ...,
        id: str | None = ...,
        callback: Callable[[Transaction], Awaitable[Any]] | None = ...,
    ) -> Completed: ...

    @overload
    async def continue_with(
        self: Attempt[Any, Any, tuple[Any, Any, Any, Any, JobType[_NI, _NO, _NN, _NE], *tuple[Any, ...]]],
        job_type: JobType[_NI, _NO, _NN, _NE],
        input: _NI,
        *,
        schedule: Schedule | None = ...,
        blockers: Sequence[Chain | str] = ...,
        id: str | None = ...,
        callback: Callable[[Transaction], Awaitable[Any]] | None = ...,
    ) -> Completed: ...

    @overload
    async def continue_with(
        self: Attempt[
            Any, Any, tuple[Any, Any, Any, Any, Any, JobType[_NI, _NO, _NN, _NE], *tuple[Any, ...]]
        ],
        job_type: JobType[_NI, _NO, _NN, _NE],
        input: _NI,
        *,
        schedule: Schedule | None = ...,
        blockers: Sequence[Chain | str] = ...,
        id: str | None = ...,
        callback: Callable[[Transaction], Awaitable[Any]] | None = ...,
    ) -> Completed: ...

    @overload
    async def continue_with(
        self: Attempt[Any, Any, tuple[Any, Any, Any, Any, Any, Any, Any, *tuple[Any, ...]]],
        job_type: JobType[_NI, Any],
        input: _NI,
        *,
        schedule: Schedule | None = ...,
        blockers: Sequence[Chain | str] = ...,
        id: str | None = ...,
        callback: Callable[[Transaction], Awaitable[Any]] | None = ...,
    ) -> Completed: ...

    @overload
    async def continue_with(
        self: Attempt[Any, Any, AnyContinuation],
        job_type: JobType[_NI, Any],
        input: _NI,
        *,
        schedule: Schedule | None = ...,
        blockers: Sequence[Chain | str] = ...,
        id: str | None = ...,
        callback: Callable[[Transaction], Awaitable[Any]] | None = ...,
    ) -> Completed: ...

    async def continue_with(
        self,
        job_type: JobType[Any, Any],
        input: Any,
        *,
        schedule: Schedule | None = None,
        blockers: Sequence[Chain | str] = (),
        id: str | None = None,
        callback: Callable[[Transaction], Awaitable[Any]] | None = None,
    ) -> Completed:
        """Finish this job by appending the next job of the chain.

        mypy checks ``job_type`` against the handler's annotation ``Attempt[I, O, Next]``
        (``Next``: the ``continues_with`` tuple of the job type, see the job types reference)
        and ``input`` against ``job_type``'s input type.
        """
        from jobchain.completion import ContinuationSpec

        spec = ContinuationSpec(job_type=job_type, input=input, schedule=schedule, blockers=blockers, id=id)
        return await self._finish(None, spec, callback)

    async def _finish(
        self, output: Any, continuation: Any, callback: Callable[[Transaction], Awaitable[Any]] | None
    ) -> Completed:
        if self._completed is not None:
            raise AttemptMisuseError("complete/continue_with may be called only once per attempt")
        if self._can_defer(continuation, callback):
            return self._defer(output)
        if self._can_join_group(continuation, callback):
            return await self._complete_with_group(output)
        if not self._prepared:
            # complete before any other await: the whole attempt runs atomically. Nothing runs
            # between here and job_complete, which locks and fences the row itself, so the
            # separate hold-lock round trip is needed only when a callback runs first.
            await self._prepare("atomic", None, hold=callback is not None)
        self.signal.raise_if_aborted()
        if self._tx is None:
            with self._untimed():
                await self._open_tx()
        tx = self._tx
        assert tx is not None

        async def finish() -> Completed:
            from jobchain.completion import finish_job

            if callback is not None:
                async with tx.savepoint() as savepoint:
                    await callback(savepoint)
            with self._untimed():
                result = await finish_job(
                    tx,
                    self.job,
                    self._client.job_types,
                    worker_id=self.worker_id,
                    lease_generation=self.job.lease_generation,
                    output=output,
                    continuation=continuation,
                )
            return Completed(job=result.job, continuation=result.continuation)

        completed: Completed = await run_wrapped(
            self._processor.middleware, "wrap_complete", self, finish, tx
        )
        self._completed = completed
        return completed

    async def wait_for(
        self, *chains: Chain | ChainStarted | str, runs_after_failed: bool = False
    ) -> Completed:
        """End this attempt waiting for ``chains``; the handler runs again once they all ended.

        Typically the handler starts chains (:meth:`start_chain`) and waits for them::

            started = await attempt.start_chain(resize, Image(url))
            return await attempt.wait_for(started)

        The job goes back to ``blocked`` with ``chains`` added to its blockers, its slot and
        lease are released, and the attempt uses none of its attempt budget. Once every
        blocker chain is terminal the handler runs again — a new attempt, whose
        :meth:`blockers` lists the job's declared blockers and every chain it waited for, in
        that order, with their outputs — so the handler tells the two runs apart by what it
        finds there. A chain that fails or is cancelled fails this job as a failed blocker
        does, unless ``runs_after_failed=True`` (the next attempt then reads their statuses).

        Like :meth:`complete` it ends the attempt and is called once: as the first await it
        selects atomic mode and writes in the attempt's transaction (with the chains
        :meth:`start_chain` wrote there: all or nothing); in staged mode it writes in a
        transaction of its own. Its result is what the handler returns. Notifications go
        out after commit. Raises ChainNotFoundError for a missing chain and
        InvalidArgumentError for none or for the job's own chain (the attempt then fails).
        """
        from jobchain.worker.waits import wait_in, waited_chain_ids

        if self._completed is not None:
            raise AttemptMisuseError("complete/continue_with/wait_for may be called only once per attempt")
        ids = waited_chain_ids(chains)
        if not self._prepared:
            await self._prepare("atomic", None, hold=False)
        self.signal.raise_if_aborted()
        with self._untimed():
            if self._tx is None:
                await self._open_tx()
            assert self._tx is not None
            waited = await wait_in(
                self._tx,
                self.job.id,
                ids,
                worker_id=self.worker_id,
                lease_generation=self.job.lease_generation,
                runs_after_failed=runs_after_failed,
            )
        self._completed = Completed(job=waited.job, waiting_for=tuple(ids))
        return self._completed

    def _can_defer(self, continuation: Any, callback: Any) -> bool:
        """A completion that writes nothing but itself may join a group commit.

        Only as the handler's first await (implicit atomic mode): a staged handler that ran a
        while may have lost its job, and must learn that from ``complete`` itself.
        """
        return (
            self.completion_groups is not None
            and not self._prepared
            and continuation is None
            and callback is None
            and not self._processor.middleware
        )

    def _can_join_group(self, continuation: Any, callback: Any) -> bool:
        """A staged attempt's plain completion may be written with a group, awaited in place.

        Unlike the deferred atomic case, ``complete`` returns only once the group committed,
        so the handler learns a refusal (lease lost meanwhile) from ``complete`` itself.
        """
        return (
            self.completion_groups is not None
            and self._mode == "staged"
            and self._tx is None
            and continuation is None
            and callback is None
            and not self._processor.middleware
        )

    async def _complete_with_group(self, output: Any) -> Completed:
        assert self.completion_groups is not None
        self.signal.raise_if_aborted()
        encoded = self._processor.job_type.encode_output(output)
        with self._untimed():
            finished = await self.completion_groups.complete(
                self.job, encoded, worker_id=self.worker_id, now=now_of(self._client)
            )
        self._completed = Completed(job=finished.job)
        return self._completed

    def _defer(self, output: Any) -> Completed:
        """Validate now, write when the handler returns (with other attempts' completions).

        The returned job is the completion as it will be written: ``completed_at`` is taken
        here, on the worker's clock, and the write uses exactly that time.
        """
        self._prepared = True
        self._mode = "atomic"
        self.signal.raise_if_aborted()
        encoded = self._processor.job_type.encode_output(output)
        now = now_of(self._client)
        self._deferred = (encoded, now)
        self._completed = Completed(
            job=replace(
                self.job,
                status=JobStatus.COMPLETED,
                output=encoded,
                completed_at=now,
                completed_by=self.worker_id,
                leased_by=None,
                leased_until=None,
                last_attempt_error=None,
            )
        )
        return self._completed

    def _untimed(self) -> AbstractContextManager[object]:
        """Stops the handler's deadline clock while jobchain works for the handler."""
        deadline = self.deadline
        return _NOTHING if deadline is None else deadline

    async def _in_savepoint(self, hook: str, callback: Callable[[Transaction], Awaitable[Any]]) -> Any:
        assert self._tx is not None
        async with self._tx.savepoint() as savepoint:

            async def run() -> Any:
                return await callback(savepoint)

            return await run_wrapped(self._processor.middleware, hook, self, run, savepoint)

    async def _hold_job(self) -> None:
        """Atomic mode: lock the job's row until the attempt transaction ends.

        Atomic attempts do not renew their claim's lease, so without the lock a reaper would
        return a long atomic attempt to pending once the lease ran out and another worker
        would run it again (and again). Reapers and claims skip locked rows.
        """
        assert self._tx is not None
        current = await self._tx.state.job_get(JobGet(job_id=self.job.id, lock=True))
        reason = reason_for(current, self.worker_id, self.job.lease_generation)
        if reason is not None:
            raise AttemptAbortedError(reason)

    async def _open_tx(self) -> None:
        self._tx_stack = AsyncExitStack()
        self._tx = await self._tx_stack.enter_async_context(self._client.transaction())

    async def _commit_tx(self) -> None:
        stack, self._tx_stack, self._tx = self._tx_stack, None, None
        if stack is not None:
            await stack.aclose()

    async def close_success(self) -> None:
        """Commit the attempt transaction, if one is open (hooks then flush), or write the
        queued completion with its group."""
        deferred, self._deferred = self._deferred, None
        if deferred is not None and self.completion_groups is not None:
            output, now = deferred
            finished = await self.completion_groups.complete(
                self.job, output, worker_id=self.worker_id, now=now
            )
            self._completed = Completed(job=finished.job)
            return
        await self._commit_tx()

    async def close_failure(self, error: BaseException) -> None:
        """Roll back the open attempt transaction, if any; nothing it wrote survives."""
        self._deferred = None
        stack, self._tx_stack, self._tx = self._tx_stack, None, None
        if stack is None:
            return
        try:
            await stack.__aexit__(type(error), error, error.__traceback__)
        except BaseException as raised:  # the transaction re-raises what it rolled back
            if raised is not error:
                raise

    @property
    def completed(self) -> Completed | None:
        return self._completed

    def unfinished(self) -> bool:
        """No completion yet, or one still waiting for its commit (it would roll back)."""
        return self._completed is None or self._tx is not None or self._deferred is not None
