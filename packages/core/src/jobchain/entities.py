"""Immutable entities: jobs, chains, schedules, deduplication options, pages."""

from __future__ import annotations

import math
import os
import re
import time
import uuid
from collections.abc import Sequence
from dataclasses import MISSING, dataclass, field, fields
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any, Generic, Literal, TypeAlias, TypeVar

from jobchain.errors import InvalidArgumentError, InvalidJobIdError
from jobchain.stored_text import MAX_KEY_CHARS, check_key

JsonValue: TypeAlias = Any
"""A value that survives ``json.dumps``/``json.loads`` unchanged (validated at the client boundary)."""

T = TypeVar("T")


class JobStatus(StrEnum):
    """Stored status of a job: ``blocked → pending → running → completed``, or one of the other
    terminal statuses ``failed`` (attempts exhausted, failed on purpose, or a blocker chain
    failed) and ``cancelled`` (by ``client.cancel_chain``)."""

    BLOCKED = "blocked"
    PENDING = "pending"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def terminal(self) -> bool:
        """True for ``completed``, ``failed`` and ``cancelled``: nothing runs it again unless retried."""
        return self in TERMINAL_STATUSES


TERMINAL_STATUSES = frozenset({JobStatus.COMPLETED, JobStatus.FAILED, JobStatus.CANCELLED})
"""The statuses a job (and so a chain) ends in."""


class RescueReason(StrEnum):
    """Why a running job was returned to pending without its worker's word."""

    LEASE_EXPIRED = "lease_expired"
    WORKER_DEAD = "worker_dead"


class WorkerState(StrEnum):
    """A registered worker's state: what it last said, or ``dead`` once it stopped heartbeating."""

    RUNNING = "running"
    DRAINING = "draining"
    STOPPED = "stopped"
    DEAD = "dead"


ATTEMPT_ERRORS_KEPT = 10
"""How many entries a job's error history keeps (the oldest are dropped)."""
MAX_ERROR_MESSAGE_CHARS = 2_000
"""An attempt error's message is cut to its first this-many characters."""
MAX_TRACEBACK_CHARS = 4_000
"""An attempt error's traceback is cut to its last this-many characters (the innermost frames)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class AttemptError:
    """One entry of a job's error history: a failed, timed-out or abandoned attempt.

    ``message`` keeps its head and ``traceback`` its tail, cut to
    :data:`MAX_ERROR_MESSAGE_CHARS` and :data:`MAX_TRACEBACK_CHARS` on construction, so an
    entry's size is bounded whatever the handler raised.
    """

    attempt: int
    worker_id: str | None
    error_type: str
    message: str
    traceback: str | None = None
    at: datetime

    def __post_init__(self) -> None:
        if len(self.message) > MAX_ERROR_MESSAGE_CHARS:
            object.__setattr__(self, "message", self.message[: MAX_ERROR_MESSAGE_CHARS - 1] + "…")
        if self.traceback is not None and len(self.traceback) > MAX_TRACEBACK_CHARS:
            object.__setattr__(self, "traceback", "…" + self.traceback[-(MAX_TRACEBACK_CHARS - 1) :])

    def to_json(self) -> dict[str, Any]:
        """The stored form (the same in every backend): ``at`` as an ISO 8601 string."""
        return {
            "attempt": self.attempt,
            "worker_id": self.worker_id,
            "error_type": self.error_type,
            "message": self.message,
            "traceback": self.traceback,
            "at": self.at.isoformat(),
        }

    @classmethod
    def from_json(cls, value: Any) -> AttemptError:
        """Read the stored form back (see :meth:`to_json`)."""
        at = datetime.fromisoformat(value["at"])
        return cls(
            attempt=int(value["attempt"]),
            worker_id=value.get("worker_id"),
            error_type=str(value["error_type"]),
            message=str(value["message"]),
            traceback=value.get("traceback"),
            at=at if at.tzinfo is not None else at.replace(tzinfo=UTC),
        )


def attempt_errors_from_json(value: Any) -> tuple[AttemptError, ...]:
    """A stored error history (a JSON array, or None) as entities, oldest first."""
    if not value:
        return ()
    return tuple(AttemptError.from_json(item) for item in value)


def utcnow() -> datetime:
    """The current time as an aware UTC datetime."""
    return datetime.now(UTC)


_VARIANT_DIGIT = {digit: "89ab"[int(digit, 16) & 3] for digit in "0123456789abcdef"}
"""A random hex digit -> the digit holding the RFC 9562 variant (10) and two of its random bits."""


def new_id() -> str:
    """A new job id: a canonical lowercase UUID string, version 7 (RFC 9562).

    Version 7 starts with the creation time in milliseconds, so new jobs land at the end of
    the id index instead of on a random page of it (what keeps inserts cheap once the table
    holds millions of rows); the other 74 bits are random.
    """
    stamp = f"{time.time_ns() // 1_000_000 & 0xFFFF_FFFF_FFFF:012x}"
    rand = os.urandom(10).hex()  # 20 hex digits, of which 19 are used
    return f"{stamp[:8]}-{stamp[8:]}-7{rand[:3]}-{_VARIANT_DIGIT[rand[3]]}{rand[4:7]}-{rand[7:19]}"


def new_ids(count: int) -> list[str]:
    """``count`` new job ids, as :func:`new_id` makes them, for one batch.

    One clock read and one ``os.urandom`` call serve the whole batch (about a sixth of the
    cost of :func:`new_id` per id). The ids share the millisecond of their creation and carry
    74 random bits each, like :func:`new_id`'s; the list is sorted.
    """
    if count == 1:
        return [new_id()]
    stamp = f"{time.time_ns() // 1_000_000 & 0xFFFF_FFFF_FFFF:012x}"
    head = f"{stamp[:8]}-{stamp[8:]}-7"  # time, then the version digit
    rand = os.urandom(10 * count).hex()  # 20 hex digits per id, of which 19 are used
    variant = _VARIANT_DIGIT
    ids = [
        f"{head}{rand[i : i + 3]}-{variant[rand[i + 3]]}{rand[i + 4 : i + 7]}-{rand[i + 7 : i + 19]}"
        for i in range(0, 20 * count, 20)
    ]
    # In increasing order: a batch's rows then reach the id indexes in key order, which costs
    # the database less than random order within the millisecond (SQLite: ~1.1 of ~7.2 ms of
    # CPU per 1,000-row insert).
    ids.sort()
    return ids


CANONICAL_ID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
"""A canonical (lowercase, hyphenated) UUID string: what ``str(uuid.UUID(...))`` returns."""


def validate_id(value: object, source: Literal["caller", "generator"] = "caller") -> str:
    """Return ``value`` as a canonical UUID string or raise :class:`InvalidJobIdError`."""
    if not isinstance(value, str):
        raise InvalidJobIdError(value, source)
    if CANONICAL_ID.fullmatch(value):
        return value  # already canonical: no UUID round trip (this runs for every new job)
    try:
        parsed = uuid.UUID(value)
    except ValueError:
        raise InvalidJobIdError(value, source) from None
    canonical = str(parsed)
    if canonical != value.lower():
        raise InvalidJobIdError(value, source)
    return canonical


def _require_aware(name: str, value: datetime | None) -> None:
    if value is not None and value.tzinfo is None:
        raise InvalidArgumentError(f"{name} must be timezone-aware (use datetime.now(timezone.utc))")


MAX_DELAY = timedelta(days=36500)
"""Longest ``Schedule.after`` (about 100 years): beyond it ``now + after`` nears ``datetime.max``."""


@dataclass(frozen=True, slots=True)
class Schedule:
    """When a job becomes eligible: at an absolute time or after a delay (exactly one)."""

    at: datetime | None = None
    after: timedelta | None = None

    def __post_init__(self) -> None:
        if (self.at is None) == (self.after is None):
            raise InvalidArgumentError("Schedule needs exactly one of at= or after=")
        _require_aware("Schedule.at", self.at)
        if self.after is not None:
            seconds = self.after.total_seconds()
            if math.isnan(seconds) or seconds < 0:
                raise InvalidArgumentError(f"Schedule.after must be a non-negative delay, got {self.after!r}")
            if self.after > MAX_DELAY:
                raise InvalidArgumentError(
                    f"Schedule.after must be at most {MAX_DELAY.days} days, got {self.after!r}: "
                    "use Schedule(at=...) for a date that far ahead, or leave the job unscheduled"
                )

    @classmethod
    def in_seconds(cls, seconds: float) -> Schedule:
        """Schedule after a number of seconds; NaN, infinite or negative values are rejected."""
        if not isinstance(seconds, (int, float)) or math.isnan(seconds) or math.isinf(seconds):
            raise InvalidArgumentError(f"delay must be a finite number of seconds, got {seconds!r}")
        if seconds < 0:
            raise InvalidArgumentError(f"delay must not be negative, got {seconds!r}")
        if seconds > MAX_DELAY.total_seconds():
            raise InvalidArgumentError(f"delay must be at most {MAX_DELAY.days} days, got {seconds!r} s")
        return cls(after=timedelta(seconds=seconds))

    def resolve(self, now: datetime) -> datetime:
        """The eligibility time, clamped so it is never before ``now``."""
        target = self.at if self.at is not None else now + (self.after or timedelta())
        return max(target, now)


PRIORITY_MIN = -100
PRIORITY_MAX = 100
PRIORITY_AGING = timedelta(minutes=1)
"""Default of ``JobsAcquire.priority_aging`` / ``Worker(priority_aging=)``: the starvation bound."""
MAX_ORDERING_KEY_CHARS = MAX_KEY_CHARS


def validate_priority(value: object, where: str = "priority") -> int:
    """Return ``value`` if it is an integer priority in range, else raise InvalidArgumentError."""
    if not isinstance(value, int) or isinstance(value, bool) or not PRIORITY_MIN <= value <= PRIORITY_MAX:
        raise InvalidArgumentError(
            f"{where} must be an integer from {PRIORITY_MIN} to {PRIORITY_MAX} (higher runs first), "
            f"got {value!r}"
        )
    return value


def validate_ordering_key(value: object) -> str:
    """Return ``value`` if it is a usable ordering key, else raise InvalidArgumentError."""
    return check_key("ordering_key", value)


@dataclass(frozen=True, slots=True)
class RateLimit:
    """At most ``limit`` attempts of a job type start per ``per``, across every worker.

    Fixed windows: each window starts at a multiple of ``per`` since the Unix epoch, and its
    count starts again from zero (so up to ``2 * limit`` attempts may start within ``per``
    across a window boundary).
    """

    limit: int
    per: timedelta

    def __post_init__(self) -> None:
        if not isinstance(self.limit, int) or isinstance(self.limit, bool) or self.limit < 1:
            raise InvalidArgumentError(f"RateLimit.limit must be a positive integer, got {self.limit!r}")
        if not isinstance(self.per, timedelta) or self.per <= timedelta(0):
            raise InvalidArgumentError(f"RateLimit.per must be a positive timedelta, got {self.per!r}")
        if self.per % timedelta(milliseconds=1):
            raise InvalidArgumentError(
                f"RateLimit.per must be a whole number of milliseconds, got {self.per!r}"
            )

    def window_start(self, now: datetime) -> datetime:
        """The start of the window holding ``now``."""
        epoch = datetime(1970, 1, 1, tzinfo=UTC)
        return epoch + ((now - epoch) // self.per) * self.per


@dataclass(frozen=True, slots=True, kw_only=True)
class TypeLimits:
    """The fleet-wide limits a claim enforces for one job type (None: no such limit)."""

    max_running: int | None = None
    rate_limit: RateLimit | None = None

    def __post_init__(self) -> None:
        value = self.max_running
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
            raise InvalidArgumentError(
                f"max_running must be a positive integer or None, got {self.max_running!r}"
            )


@dataclass(frozen=True, slots=True, kw_only=True)
class PausedType:
    """A job type no worker claims until it is resumed."""

    type_name: str
    paused_at: datetime


@dataclass(frozen=True, slots=True, kw_only=True)
class ScheduleRecord:
    """A periodic schedule as the state backend keeps it, for listing without the user's code.

    Workers register the schedules they run at start and after every tick. ``last_tick_at`` /
    ``last_chain_id``: the latest tick a worker started a chain for (deduplicated or not).
    ``last_seen_at``: the latest registration; a schedule removed from code stops there.
    """

    name: str
    cron: str
    timezone: str
    type_name: str
    catch_up: bool
    worker_name: str
    registered_at: datetime
    last_seen_at: datetime
    last_tick_at: datetime | None = None
    last_chain_id: str | None = None
    next_tick_at: datetime | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Deduplication:
    """Start-time deduplication: an existing matching chain is returned instead of a new one.

    ``scope="incomplete"`` matches a chain of the same type and key whose last job is not
    completed. ``scope="any"`` matches any chain created within ``window`` (required).
    """

    key: str
    scope: Literal["incomplete", "any"] = "incomplete"
    window: timedelta | None = None
    exclude_chain_ids: Sequence[str] = ()

    def __post_init__(self) -> None:
        check_key("Deduplication.key", self.key)
        if self.scope not in ("incomplete", "any"):
            raise InvalidArgumentError(
                f"Deduplication.scope must be 'incomplete' or 'any', got {self.scope!r}"
            )
        if self.scope == "any" and self.window is None:
            raise InvalidArgumentError(
                "Deduplication scope 'any' needs window= (a timedelta), otherwise it never expires"
            )
        if self.window is not None and self.window <= timedelta(0):
            raise InvalidArgumentError(f"Deduplication.window must be positive, got {self.window!r}")
        object.__setattr__(self, "exclude_chain_ids", tuple(self.exclude_chain_ids))


@dataclass(frozen=True, slots=True, kw_only=True)
class Job:
    """One stored job. Running jobs carry a lease; completed jobs carry their output."""

    id: str
    chain_id: str
    type_name: str
    chain_type_name: str
    chain_index: int
    status: JobStatus
    input: JsonValue
    output: JsonValue = None
    created_at: datetime
    scheduled_at: datetime
    attempt: int = 0
    last_attempt_at: datetime | None = None
    last_attempt_error: str | None = None
    first_attempt_at: datetime | None = None
    """When a worker first claimed the job (None while it was never claimed)."""
    attempt_started_at: datetime | None = None
    """When the current (or, once finished, the last) attempt was claimed."""
    leased_by: str | None = None
    leased_until: datetime | None = None
    lease_generation: int = 0
    completed_at: datetime | None = None
    completed_by: str | None = None
    deduplication_key: str | None = None
    trace_context: JsonValue = None
    chain_trace_context: JsonValue = None
    rescued_at: datetime | None = None
    """When the job was last rescued: its attempt abandoned and the job returned to pending
    because the lease expired or the worker holding it was found dead. Kept afterwards."""
    rescued_from: str | None = None
    """The worker whose attempt was abandoned at the last rescue."""
    rescue_reason: str | None = None
    """Why: ``"lease_expired"`` or ``"worker_dead"`` (see :class:`RescueReason`)."""
    attempt_errors: tuple[AttemptError, ...] = ()
    """The error history, oldest first: the last :data:`ATTEMPT_ERRORS_KEPT` failed, timed-out
    or abandoned attempts (and a blocker's failure, for a job failed by it). Kept when a later
    attempt succeeds and across retries."""
    attempt_base: int = 0
    """The ``attempt`` count when the job was last retried (``client.retry_job``): its attempt
    budget counts the attempts after it, so ``attempt - attempt_base`` attempts were used."""
    failed_at: datetime | None = None
    """When the job became ``failed`` (cleared by a retry)."""
    cancelled_at: datetime | None = None
    """When the job became ``cancelled`` (cleared by a retry)."""
    cancel_reason: str | None = None
    """The reason given to ``cancel_chain`` (cleared by a retry)."""
    failed_by_chain_id: str | None = None
    """For a job failed because a blocker chain failed or was cancelled: that chain's id.
    Retrying that chain's job retries this job with it."""
    runs_after_failed_blockers: bool = False
    """Set from the job type when the job was created: it runs once every blocker chain is
    terminal, whatever their status, instead of failing with the first that fails."""
    priority: int = 0
    """Claim priority (:data:`PRIORITY_MIN` to :data:`PRIORITY_MAX`): higher is claimed first,
    FIFO within a priority; a job due for longer than the claim's ``priority_aging`` goes
    ahead of every job that has waited less, whatever their priorities."""
    ordering_key: str | None = None
    """Set on a chain's root only: chains sharing the key run one at a time, in start order."""

    @property
    def is_root(self) -> bool:
        """True for the first job of its chain (``id == chain_id``)."""
        return self.id == self.chain_id

    @property
    def finished_at(self) -> datetime | None:
        """When the job reached its terminal status (None while it has not)."""
        return self.completed_at or self.failed_at or self.cancelled_at

    @property
    def attempts_used(self) -> int:
        """Attempts used since the last retry (``attempt - attempt_base``): what ``max_attempts`` limits."""
        return self.attempt - self.attempt_base


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerInfo:
    """One row of the worker registry, as its worker last reported it.

    ``state`` is ``dead`` once ``alive_until`` passed without a clean stop, whether or not a
    live worker has released its jobs yet.

    The load, as of ``last_seen_at``, counts the jobs the worker holds — claimed, leased to
    it, their attempt's outcome not yet written: ``inflight`` are those it runs (handlers
    running) or is about to run (``buffered``: prefetched, waiting for a slot), never more than
    ``capacity``, ``concurrency`` slots (times ``max_batch`` for a batch processor) plus its
    ``prefetch``. ``committing`` are beside them: attempts whose handler returned and whose
    commit is being written (they gave their slot on; the database still shows them running
    until it lands). Jobs whose outcome committed, or that the worker lost (cancelled, taken by
    another worker, deleted, its lease expired locally), count nowhere. A row written by a
    worker older than these fields says 0 for ``buffered``, ``committing`` and ``capacity``.
    """

    id: str
    name: str
    host: str
    pid: int
    version: str
    type_names: tuple[str, ...]
    concurrency: int
    inflight: int
    state: WorkerState
    started_at: datetime
    last_seen_at: datetime
    alive_until: datetime
    buffered: int = 0
    committing: int = 0
    capacity: int = 0

    @property
    def running(self) -> int:
        """Jobs whose handler runs: ``inflight - buffered``."""
        return self.inflight - self.buffered

    @property
    def held(self) -> int:
        """Every job the worker holds: ``inflight + committing``."""
        return self.inflight + self.committing


def _use_slot_setting_init(cls: type) -> None:
    """Give a frozen slots dataclass an ``__init__`` that fills each slot through its descriptor.

    The generated one calls ``object.__setattr__(self, name, value)`` per field, which looks
    the slot up by name every time: building a Job that way was a sixth of the cost of
    starting a chain in a batch. This one has the same signature (positional and keyword-only
    parameters, defaults), errors (same ``__qualname__``) and stored values; only faster.
    """
    if hasattr(cls, "__post_init__"):
        raise TypeError(f"{cls.__name__}: __post_init__ is not supported here")
    namespace: dict[str, Any] = {}
    positional: list[str] = []
    keyword: list[str] = []
    lines: list[str] = []
    for f in fields(cls):
        if f.default_factory is not MISSING:
            raise TypeError(f"{cls.__name__}.{f.name}: default_factory is not supported here")
        param = f.name
        if f.default is not MISSING:
            namespace[f"_default_{f.name}"] = f.default
            param = f"{f.name}=_default_{f.name}"
        (keyword if f.kw_only else positional).append(param)
        namespace[f"_set_{f.name}"] = cls.__dict__[f.name].__set__
        lines.append(f"    _set_{f.name}(self, {f.name})")
    params = ", ".join(["self", *positional, *(["*", *keyword] if keyword else [])])
    source = f"def __init__({params}):\n" + "\n".join(lines) + "\n"
    exec(source, namespace)  # built from the class's own field names only
    init = namespace["__init__"]
    original = cls.__dict__["__init__"]
    init.__qualname__ = original.__qualname__
    init.__module__ = original.__module__
    init.__annotations__ = original.__annotations__
    init.__doc__ = original.__doc__
    setattr(cls, "__init__", init)  # noqa: B010 -- mypy refuses a direct assignment to a method


_use_slot_setting_init(Job)


@dataclass(frozen=True, slots=True)
class Chain:
    """A chain is its first job plus its current last job (the same job when alone)."""

    root: Job
    last: Job

    @property
    def id(self) -> str:
        return self.root.id

    @property
    def type_name(self) -> str:
        return self.root.chain_type_name

    @property
    def status(self) -> JobStatus:
        """The status of the chain's last job."""
        return self.last.status

    @property
    def output(self) -> JsonValue:
        return self.last.output if self.last.status is JobStatus.COMPLETED else None

    @property
    def created_at(self) -> datetime:
        return self.root.created_at

    @property
    def completed_at(self) -> datetime | None:
        return self.last.completed_at if self.last.status is JobStatus.COMPLETED else None

    @property
    def finished_at(self) -> datetime | None:
        """When the chain reached its terminal status (its last job's)."""
        return self.last.finished_at


_use_slot_setting_init(Chain)


@dataclass(frozen=True, slots=True)
class Page(Generic[T]):
    """One page of a listing; pass ``next_cursor`` back to read the next page (None at the end)."""

    items: list[T] = field(default_factory=list)
    next_cursor: str | None = None
