"""Processor slices: which handler runs each job type, with its middleware and settings.

Slices are declared in any module and merged when the worker is built; a type handled by
two slices is an error at merge time, never a silent winner.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeVar, overload

from jobchain.errors import DuplicateJobTypeError, InvalidArgumentError, InvalidScheduleError
from jobchain.job_types import UNSET, MaxAttempts, validate_max_attempts, validate_timeout
from jobchain.periodic import CronTicks, PeriodicSchedule, validate_schedule_name
from jobchain.worker.backoff import Backoff, LeaseConfig

if TYPE_CHECKING:
    from jobchain.job_types import AnyContinuation, JobType
    from jobchain.transactions import Transaction
    from jobchain.worker.attempt import Attempt, Completed
    from jobchain.worker.batch import Batch

I = TypeVar("I")  # noqa: E741 -- conventional input/output type variable names
O = TypeVar("O")  # noqa: E741
# The job type's successors (its ``N``, the tuple of ``continues_with``), matched against the
# ``Next`` of the handler's ``Attempt[I, O, Next]`` by register() and handler().
_N = TypeVar("_N")

AsyncHandler = Callable[["Attempt[Any, Any, Any]"], Awaitable["Completed"]]
SyncHandler = Callable[["Attempt[Any, Any, Any]"], Any]
Next = Callable[[], Awaitable[Any]]
SyncHandlerWrapper = Callable[[Callable[[], Any]], Any]
"""``Worker(sync_handler_wrapper=...)``: runs in the thread of every sync handler call (batch
handlers too); it must call its argument once and return its result (or let its exception
propagate). For per-thread setup around the call, e.g. Django's ``close_old_connections()``."""


class AttemptMiddleware(Protocol):
    """Wraps the phases of every attempt of a slice, first middleware outermost.

    Implement any of ``wrap_handler``, ``wrap_prepare``, ``wrap_complete``; each receives the
    attempt (whose ``context`` dict it may fill) and ``call_next``, which it must await once.
    """


@dataclass(frozen=True, slots=True)
class Processor:
    """One job type's handler and its settings (overriding the type's and the worker's)."""

    job_type: JobType[Any, Any]
    handler: Callable[..., Any]
    is_async: bool
    middleware: tuple[object, ...]
    retry: Backoff | None = None
    lease: LeaseConfig | None = None
    max_batch: int | None = None
    """Set for a batch processor: its handler takes up to this many jobs at once."""
    max_attempts: MaxAttempts = UNSET
    """Attempt limit (None: unlimited; UNSET: the job type's, then the worker's)."""
    timeout: timedelta | None = None
    """Handler deadline (None: the job type's, then the worker's)."""


DEFAULT_MAX_BATCH = 100
"""Most jobs a batch handler receives at once unless it says otherwise."""


@dataclass
class Processors:
    """A slice of processors with the middleware that wraps all of its attempts.

    ``max_attempts`` and ``timeout`` are the slice's defaults for its processors that set
    none; they win over the job type's and the worker's settings.
    """

    middleware: Sequence[object] = ()
    _by_type: dict[str, Processor] = field(default_factory=dict)
    _periodic: dict[str, PeriodicSchedule] = field(default_factory=dict)
    max_attempts: MaxAttempts = UNSET
    timeout: timedelta | float | None = None

    def __post_init__(self) -> None:
        self.max_attempts = validate_max_attempts(self.max_attempts, "Processors(max_attempts=...)")
        self.timeout = validate_timeout(self.timeout, "Processors(timeout=...)")

    def _limits(
        self, name: str, max_attempts: MaxAttempts, timeout: timedelta | float | None
    ) -> tuple[MaxAttempts, timedelta | None]:
        """A processor's own limits, validated, else the slice's."""
        checked = validate_max_attempts(max_attempts, f"{name}: max_attempts")
        deadline = validate_timeout(timeout, f"{name}: timeout")
        slice_timeout = self.timeout if isinstance(self.timeout, timedelta) else None
        return (
            checked if checked is not UNSET else self.max_attempts,
            deadline if deadline is not None else slice_timeout,
        )

    # Three overloads, so that a handler annotated with successors (``Attempt[I, O, Next]``)
    # must name exactly the job type's ``continues_with`` tuple (same length, order, inputs and
    # outputs), while the annotations that name none keep type-checking: a job type declared
    # without a tuple (or annotated ``JobType[I, O]``) takes any handler, and a handler
    # annotated ``Attempt[I, O]`` (continue with anything, checked at run time) any job type.
    # The exact overload comes first: a call that matches none is reported against it
    # ("Argument 2 to "register" of "Processors" has incompatible type ...; expected ...").
    @overload
    def register(
        self,
        job_type: JobType[I, O, _N, Any],
        handler: Callable[[Attempt[I, O, _N]], Awaitable[Completed]] | Callable[[Attempt[I, O, _N]], Any],
        *,
        retry: Backoff | None = ...,
        lease: LeaseConfig | None = ...,
        max_attempts: MaxAttempts = ...,
        timeout: timedelta | float | None = ...,
    ) -> None: ...

    @overload
    def register(
        self,
        job_type: JobType[I, O, AnyContinuation, Any],
        handler: Callable[[Attempt[I, O, Any]], Awaitable[Completed]] | Callable[[Attempt[I, O, Any]], Any],
        *,
        retry: Backoff | None = ...,
        lease: LeaseConfig | None = ...,
        max_attempts: MaxAttempts = ...,
        timeout: timedelta | float | None = ...,
    ) -> None: ...

    @overload
    def register(
        self,
        job_type: JobType[I, O, Any, Any],
        handler: Callable[[Attempt[I, O, AnyContinuation]], Awaitable[Completed]]
        | Callable[[Attempt[I, O, AnyContinuation]], Any],
        *,
        retry: Backoff | None = ...,
        lease: LeaseConfig | None = ...,
        max_attempts: MaxAttempts = ...,
        timeout: timedelta | float | None = ...,
    ) -> None: ...

    def register(
        self,
        job_type: JobType[Any, Any],
        handler: Callable[[Attempt[Any, Any, Any]], Any],
        *,
        retry: Backoff | None = None,
        lease: LeaseConfig | None = None,
        max_attempts: MaxAttempts = UNSET,
        timeout: timedelta | float | None = None,
    ) -> None:
        """Handle ``job_type`` with ``handler`` (async: runs on the loop; sync: in a thread).

        ``max_attempts`` (None: unlimited) and ``timeout`` (a handler deadline, seconds or a
        timedelta) win over the slice's, the job type's and the worker's.
        """
        if job_type.name in self._by_type:
            raise DuplicateJobTypeError([job_type.name])
        if not callable(handler):
            raise InvalidArgumentError(f"handler for {job_type.name!r} must be callable")
        limit, deadline = self._limits(job_type.name, max_attempts, timeout)
        self._by_type[job_type.name] = Processor(
            job_type=job_type,
            handler=handler,
            is_async=_is_async(handler),
            middleware=tuple(self.middleware),
            retry=retry,
            lease=lease,
            max_attempts=limit,
            timeout=deadline,
        )

    # As for register(): a job type declared without a tuple takes any handler (first, as
    # only the job type is known here); one declared with a tuple takes a handler annotated
    # with exactly that tuple, or with none (``Attempt[I, O]``).
    @overload
    def handler(
        self,
        job_type: JobType[I, O, AnyContinuation, Any],
        *,
        retry: Backoff | None = ...,
        lease: LeaseConfig | None = ...,
        max_attempts: MaxAttempts = ...,
        timeout: timedelta | float | None = ...,
    ) -> Callable[[Callable[[Attempt[I, O, Any]], Any]], Callable[[Attempt[I, O, Any]], Any]]: ...

    @overload
    def handler(
        self,
        job_type: JobType[I, O, _N, Any],
        *,
        retry: Backoff | None = ...,
        lease: LeaseConfig | None = ...,
        max_attempts: MaxAttempts = ...,
        timeout: timedelta | float | None = ...,
    ) -> Callable[
        [Callable[[Attempt[I, O, _N]], Any] | Callable[[Attempt[I, O, AnyContinuation]], Any]],
        Callable[[Attempt[I, O, Any]], Any],
    ]: ...

    def handler(
        self,
        job_type: JobType[Any, Any],
        *,
        retry: Backoff | None = None,
        lease: LeaseConfig | None = None,
        max_attempts: MaxAttempts = UNSET,
        timeout: timedelta | float | None = None,
    ) -> Callable[[Callable[[Attempt[Any, Any, Any]], Any]], Callable[[Attempt[Any, Any, Any]], Any]]:
        """Decorator form of :meth:`register`."""

        def decorate(fn: Callable[[Attempt[Any, Any, Any]], Any]) -> Callable[[Attempt[Any, Any, Any]], Any]:
            self.register(job_type, fn, retry=retry, lease=lease, max_attempts=max_attempts, timeout=timeout)
            return fn

        return decorate

    def register_batch(
        self,
        job_type: JobType[I, O],
        handler: Callable[[Batch[I, O]], Awaitable[Sequence[O | BaseException]]]
        | Callable[[Batch[I, O]], Sequence[O | BaseException]],
        *,
        max_batch: int = DEFAULT_MAX_BATCH,
        retry: Backoff | None = None,
        lease: LeaseConfig | None = None,
        max_attempts: MaxAttempts = UNSET,
        timeout: timedelta | float | None = None,
    ) -> None:
        """Handle ``job_type`` many jobs at a time: ``handler(batch)`` returns one output per job.

        An exception in a job's place reschedules that job alone (or fails it, once its
        attempts are used up or for ``FailJob`` and the type's ``fail_on``); a handler that
        raises does so for every job of the batch, and so does one that runs past its
        ``timeout`` (the whole call's deadline). See :class:`jobchain.worker.Batch`.
        """
        if job_type.name in self._by_type:
            raise DuplicateJobTypeError([job_type.name])
        if not callable(handler):
            raise InvalidArgumentError(f"batch handler for {job_type.name!r} must be callable")
        if not isinstance(max_batch, int) or isinstance(max_batch, bool) or max_batch < 1:
            raise InvalidArgumentError(f"max_batch must be a positive integer, got {max_batch!r}")
        if self.middleware:
            raise InvalidArgumentError(
                f"middleware wraps one attempt at a time; register the batch handler for "
                f"{job_type.name!r} in a Processors() slice without middleware"
            )
        limit, deadline = self._limits(job_type.name, max_attempts, timeout)
        self._by_type[job_type.name] = Processor(
            job_type=job_type,
            handler=handler,
            is_async=_is_async(handler),
            middleware=(),
            retry=retry,
            lease=lease,
            max_batch=max_batch,
            max_attempts=limit,
            timeout=deadline,
        )

    def batch_handler(
        self,
        job_type: JobType[I, O],
        *,
        max_batch: int = DEFAULT_MAX_BATCH,
        retry: Backoff | None = None,
        lease: LeaseConfig | None = None,
        max_attempts: MaxAttempts = UNSET,
        timeout: timedelta | float | None = None,
    ) -> Callable[[Callable[[Batch[I, O]], Any]], Callable[[Batch[I, O]], Any]]:
        """Decorator form of :meth:`register_batch`."""

        def decorate(fn: Callable[[Batch[I, O]], Any]) -> Callable[[Batch[I, O]], Any]:
            self.register_batch(
                job_type,
                fn,
                max_batch=max_batch,
                retry=retry,
                lease=lease,
                max_attempts=max_attempts,
                timeout=timeout,
            )
            return fn

        return decorate

    def periodic(
        self,
        cron: str,
        job_type: JobType[I, Any, Any, Literal[True]],
        input: I,
        *,
        name: str | None = None,
        timezone: str = "UTC",
        catch_up: bool = True,
    ) -> PeriodicSchedule:
        """Start a chain of the entry type ``job_type`` with ``input`` at every tick of ``cron``.

        ``cron`` is a cron expression (``"0 3 * * *"``: every day at 03:00; parsed by cronsim,
        see :mod:`jobchain.periodic`) evaluated in the IANA ``timezone`` (daylight saving
        time included). ``name`` (default: the type's name) identifies the schedule across
        workers and deploys: every worker declaring it starts exactly one chain per tick
        between them (a deduplication key per name and tick). ``catch_up``: a worker that
        starts after a tick no worker ran (the fleet was down) starts the chain of the last
        missed tick only, never one per missed tick; False skips it. A tick before the
        schedule was first registered is not missed: a new schedule starts from now.
        Schedules are registered in the state backend (``jobchain schedules``); one no worker
        declares any more is forgotten a week after it was last seen.

        Raises :class:`~jobchain.errors.InvalidScheduleError` (naming the expression) for an
        invalid cron expression, an unknown timezone, a bad or duplicate name, and
        JobTypeValidationError for an input the type refuses — at declaration.
        """
        ticks = CronTicks.parse(cron, timezone)
        type_name = getattr(job_type, "name", None)
        if not isinstance(type_name, str) or not hasattr(job_type, "encode_input"):
            raise InvalidScheduleError(
                f"schedule {cron!r}: job_type must be a JobType from JobTypes.define, got {job_type!r}",
                cron=cron,
                timezone=timezone,
            )
        if not isinstance(catch_up, bool):
            raise InvalidScheduleError(
                f"schedule {cron!r}: catch_up must be True or False, got {catch_up!r}", cron=cron
            )
        schedule_name = validate_schedule_name(type_name if name is None else name)
        if schedule_name in self._periodic:
            raise InvalidScheduleError(
                f"two schedules are named {schedule_name!r} in this slice; pass name= to tell them apart",
                cron=cron,
                timezone=timezone,
            )
        if not job_type.entry:
            raise InvalidScheduleError(
                f"schedule {schedule_name!r} ({cron!r}) starts {type_name!r}, which cannot start a "
                "chain; declare that type with entry=True",
                cron=cron,
                timezone=timezone,
            )
        job_type.encode_input(input)  # JobTypeValidationError now, not at the first tick
        schedule = PeriodicSchedule(
            name=schedule_name, ticks=ticks, job_type=job_type, input=input, catch_up=catch_up
        )
        self._periodic[schedule_name] = schedule
        return schedule

    def processors(self) -> Iterable[Processor]:
        return self._by_type.values()

    def schedules(self) -> Iterable[PeriodicSchedule]:
        """The periodic schedules declared on this slice."""
        return self._periodic.values()


def _is_async(handler: Callable[..., Any]) -> bool:
    """True for ``async def`` functions and for objects whose ``__call__`` is ``async def``."""
    # An async callable object must run on the loop: in a thread it would only return an
    # un-awaited coroutine, which then fails as the job's "output".
    return inspect.iscoroutinefunction(handler) or inspect.iscoroutinefunction(type(handler).__call__)


def merge_processors(slices: Sequence[Processors]) -> dict[str, Processor]:
    """Merge slices; a type handled twice raises DuplicateJobTypeError naming it."""
    merged: dict[str, Processor] = {}
    duplicates: list[str] = []
    for piece in slices:
        for processor in piece.processors():
            if processor.job_type.name in merged:
                duplicates.append(processor.job_type.name)
            merged[processor.job_type.name] = processor
    if duplicates:
        raise DuplicateJobTypeError(duplicates)
    return merged


def merge_schedules(slices: Sequence[Processors]) -> dict[str, PeriodicSchedule]:
    """Merge the slices' schedules; one name declared twice raises InvalidScheduleError."""
    merged: dict[str, PeriodicSchedule] = {}
    for piece in slices:
        for schedule in piece.schedules():
            if schedule.name in merged:
                raise InvalidScheduleError(
                    f"two processor slices declare a schedule named {schedule.name!r}; "
                    "pass name= to tell them apart",
                    cron=schedule.cron,
                    timezone=schedule.timezone,
                )
            merged[schedule.name] = schedule
    return merged


def check_required_middleware(slices: Sequence[Processors], required: Sequence[object]) -> None:
    """Each slice's middleware must contain ``required`` (by identity) as an in-order subsequence."""
    if not required:
        return
    for index, piece in enumerate(slices):
        remaining = iter(piece.middleware)
        if not all(any(mw is need for mw in remaining) for need in required):
            names = ", ".join(type(mw).__name__ for mw in required)
            raise InvalidArgumentError(
                f"processor slice #{index} lacks required middleware ({names}) in this order; "
                "add them to Processors(middleware=[...])"
            )


async def call_in_thread(wrapper: SyncHandlerWrapper | None, handler: Callable[[Any], Any], arg: Any) -> Any:
    """``handler(arg)`` in a thread (asyncio.to_thread), inside ``wrapper`` when there is one."""
    if wrapper is None:
        return await asyncio.to_thread(handler, arg)
    return await asyncio.to_thread(wrapper, functools.partial(handler, arg))


async def run_wrapped(
    middleware: Sequence[object], hook: str, attempt: Attempt[Any, Any, Any], innermost: Next, *extra: Any
) -> Any:
    """Run ``innermost`` inside every middleware's ``hook`` (first middleware outermost)."""
    call: Next = innermost
    for mw in reversed(middleware):
        wrap = getattr(mw, hook, None)
        if wrap is None:
            continue

        def bind(wrap: Callable[..., Awaitable[Any]] = wrap, inner: Next = call) -> Next:
            async def step() -> Any:
                return await wrap(attempt, *extra, inner)

            return step

        call = bind()
    return await call()


TransactionCallback = Callable[["Transaction"], Awaitable[Any]]
