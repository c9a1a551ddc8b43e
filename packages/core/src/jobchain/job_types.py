"""The job-type registry: typed declarations of what each job takes, returns and may lead to.

Inputs and outputs are declared with **standard dataclasses** (the primary style)::

    @dataclass
    class SendEmail:
        to: str
        subject: str

    types = JobTypes()
    send_email = types.define("send_email", input=SendEmail, output=None, entry=True)

Why dataclasses, validated by msgspec:

* They are the standard library's own record type: no new vocabulary to learn, no base
  class to inherit from, and mypy, IDEs and ``dataclasses.replace`` understand them.
* msgspec validates and encodes them quickly and names the failing field in its message
  (``Expected `int`, got `str` - at `$.count```), which becomes the ``details`` of
  :class:`~jobchain.errors.JobTypeValidationError`.
* msgspec also accepts ``TypedDict``, ``msgspec.Struct``, primitives, ``None`` and
  ``dict[str, Any]`` for the cases where a dataclass is too much. pydantic v2 models work too
  (``pip install 'jobchain[pydantic]'``): stored as ``model_dump(mode="json")``, validated
  by ``model_validate``. Plain classes and pydantic v1 models are refused by
  :meth:`JobTypes.define` with :class:`~jobchain.errors.NotJsonSerializableError` (naming
  the class, its path and what is supported), never at the first start.

Registries defined in separate modules are *slices*; :meth:`JobTypes.merge` combines them
and rejects a name declared twice.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Iterator
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from datetime import timedelta
from enum import Enum
from typing import Any, Final, Generic, Literal, TypeAlias, final, get_origin, overload

import msgspec
import msgspec.inspect
from typing_extensions import TypeVar

from jobchain.end_hooks import hook_name
from jobchain.entities import JsonValue, RateLimit, TypeLimits, validate_priority
from jobchain.errors import (
    DuplicateJobTypeError,
    InvalidArgumentError,
    JobTypeValidationError,
    NotJsonSerializableError,
    UnknownJobTypeError,
)
from jobchain.json_values import MAX_PAYLOAD_BYTES, from_json_value, is_pydantic_model, to_json_value

I = TypeVar("I")  # noqa: E741 -- I/O are the conventional names for input/output type variables
O = TypeVar("O")  # noqa: E741
# The two phantom parameters of JobType (docs/reference/job-types.md, "Static typing"): what a
# job of the type may continue with, and whether it may start a chain. They default to Any, so
# an annotation ``JobType[X, Y]`` means what it always meant: any successors, entry or not.
N = TypeVar("N", covariant=True, default=Any)
E = TypeVar("E", covariant=True, default=Any)
# JobTypes.define's own type variables: None for ``input=None`` / ``output=None`` (the default
# applies when the argument does not solve it), the literal of ``entry=`` (a Literal bound keeps
# the literal where a bool bound would widen it to bool), the exact tuple of ``continues_with=``.
_In = TypeVar("_In", default=None)
_Out = TypeVar("_Out", default=None)
_Entry = TypeVar("_Entry", bound=Literal[True, False], default=Literal[False])
_Next = TypeVar("_Next", bound="tuple[JobType[Any, Any, Any, Any], ...]")

_NAME_RE = re.compile(r"[A-Za-z0-9_.:-]+")
MAX_TYPE_NAME_LENGTH = 200

NOT_ENTRY_POINT = "not_entry_point"
INVALID_INPUT = "invalid_input"
INVALID_OUTPUT = "invalid_output"
INVALID_CONTINUATION = "invalid_continuation"
INVALID_BLOCKERS = "invalid_blockers"


class _Unset(Enum):
    UNSET = "UNSET"

    def __repr__(self) -> str:
        return "UNSET"


UNSET: Final = _Unset.UNSET
"""Marks a setting left to the next level (processor → job type → registry → worker → default)."""

MaxAttempts: TypeAlias = int | Literal[_Unset.UNSET] | None
"""An attempt limit: a positive int, ``None`` for unlimited, or :data:`UNSET` to inherit."""

DEFAULT_MAX_ATTEMPTS = 25
"""The library's attempt limit when no level sets one. With the default backoff (10 s doubling
to 300 s) 25 attempts retry for about 1 h 45 min: long enough to ride out a dependency's outage,
short enough that a job that can never succeed becomes a visible dead letter the same day."""


def validate_max_attempts(value: object, where: str = "max_attempts") -> MaxAttempts:
    """Return ``value`` if it is a valid attempt limit (int ≥ 1, None or UNSET), else raise."""
    if value is UNSET or value is None:
        return value
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise InvalidArgumentError(
            f"{where} must be an integer of at least 1, or None for unlimited attempts, got {value!r}"
        )
    return value


def validate_timeout(value: object, where: str = "timeout") -> timedelta | None:
    """Return a handler deadline as a timedelta (seconds or timedelta; None: no deadline)."""
    if value is None:
        return None
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        seconds = float(value)
    else:
        raise InvalidArgumentError(f"{where} must be a timedelta or a number of seconds, got {value!r}")
    if math.isnan(seconds) or math.isinf(seconds) or seconds <= 0:
        raise InvalidArgumentError(f"{where} must be a positive, finite duration, got {value!r}")
    return value if isinstance(value, timedelta) else timedelta(seconds=seconds)


def validate_fail_on(value: object, where: str = "fail_on") -> tuple[type[BaseException], ...]:
    """Return ``value`` as a tuple of exception types (raising one of them fails the job at once)."""
    if value is None:
        return ()
    items = (value,) if isinstance(value, type) else value
    if isinstance(items, (str, bytes)) or not isinstance(items, Iterable):
        raise InvalidArgumentError(f"{where} must be a tuple of exception types, got {value!r}")
    checked = tuple(items)
    for item in checked:
        if not (isinstance(item, type) and issubclass(item, BaseException)):
            raise InvalidArgumentError(
                f"{where} must list exception types (such as ValueError), got {item!r}"
            )
    return checked


def validate_type_name(name: object) -> str:
    """Return ``name`` if it is a valid job type name, else raise InvalidArgumentError."""
    if not isinstance(name, str) or not name:
        raise InvalidArgumentError(f"job type name must be a non-empty string, got {name!r}")
    if len(name) > MAX_TYPE_NAME_LENGTH:
        raise InvalidArgumentError(
            f"job type name must be at most {MAX_TYPE_NAME_LENGTH} characters, got {len(name)}"
        )
    if not _NAME_RE.fullmatch(name):
        raise InvalidArgumentError(
            f"job type name {name!r} may only contain letters, digits and the characters _ . : -"
        )
    return name


@final
class AnyContinuation:
    """The successors of a job type declared without a tuple of job types (static typing only).

    ``continues_with`` left out, None, a list, a set or names: mypy lets its jobs continue with
    any job type (the run-time check still applies to a declared list or set). Declare
    ``continues_with=(a, b)`` to have mypy check continuations too.
    """


_Unchecked: TypeAlias = list[Any] | AbstractSet[Any] | Iterable[str]
"""``continues_with`` values that mypy does not check (the run-time check still applies).

Deliberately disjoint from a tuple of JobTypes: an overload matching both would make mypy
answer Any for a successor whose input type contains Any (overload ambiguity)."""


def _name_set(kind: str, names: Iterable[str | JobType[Any, Any]] | None) -> frozenset[str] | None:
    if names is None:
        return None
    if isinstance(names, str):
        raise InvalidArgumentError(f"{kind} must be a collection of type names, not the string {names!r}")
    return frozenset(validate_type_name(n.name if isinstance(n, JobType) else n) for n in names)


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class JobType(Generic[I, O, N, E]):
    """A declared job type: its name, input and output types and its chaining rules.

    ``JobType[I, O]`` is how to annotate one: its input and output types. :meth:`JobTypes.define`
    infers two more parameters for mypy: ``N``, the exact tuple of ``continues_with`` (or
    :class:`AnyContinuation`), and ``E``, ``Literal[True]`` for an entry type (else
    ``Literal[False]``); an annotation leaves both Any (see the job types reference).

    ``continues_with`` lists the type names a job of this type may continue with (None:
    any registered type). ``blockers`` lists the chain type names allowed as blockers
    (None: any; empty: none). ``retry``, ``lease``, ``max_attempts`` and ``timeout`` are
    per-type worker settings (unset: the slice's, then the worker's). ``fail_on`` lists
    exception types that fail the job at once instead of retrying. A job created with
    ``runs_after_failed_blockers`` runs once its blocker chains are all terminal, even if some
    failed or were cancelled (it then reads their statuses), instead of failing with them.
    ``priority`` is the default claim priority of its jobs (a start may override it);
    ``limits`` the fleet-wide ``max_running`` / ``rate_limit`` every worker's claim enforces.
    ``on_failed`` / ``on_cancelled`` name the hook types started when a job of this type fails
    or is cancelled, ``on_chain_failed`` / ``on_chain_cancelled`` those started when a chain of
    this (entry) type ends so (:mod:`jobchain.end_hooks`).
    """

    name: str
    input_type: Any
    output_type: Any
    entry: bool = False
    continues_with: frozenset[str] | None = None
    blockers: frozenset[str] | None = None
    retry: Any | None = None
    lease: Any | None = None
    max_payload_bytes: int = MAX_PAYLOAD_BYTES
    max_attempts: MaxAttempts = UNSET
    timeout: timedelta | None = None
    fail_on: tuple[type[BaseException], ...] = ()
    runs_after_failed_blockers: bool = False
    priority: int = 0
    limits: TypeLimits | None = None
    on_failed: str | None = None
    on_cancelled: str | None = None
    on_chain_failed: str | None = None
    on_chain_cancelled: str | None = None

    def encode_input(self, value: I) -> JsonValue:
        """Validate ``value`` against the input type and return it as plain JSON."""
        return self._encode(INVALID_INPUT, value, self.input_type)

    def decode_input(self, value: JsonValue) -> I:
        """Decode a stored input into the declared input type."""
        return self._decode(INVALID_INPUT, value, self.input_type)  # type: ignore[no-any-return]

    def encode_output(self, value: O) -> JsonValue:
        """Validate ``value`` against the output type and return it as plain JSON."""
        return self._encode(INVALID_OUTPUT, value, self.output_type)

    def decode_output(self, value: JsonValue) -> O:
        """Decode a stored output into the declared output type."""
        return self._decode(INVALID_OUTPUT, value, self.output_type)  # type: ignore[no-any-return]

    def _encode(self, code: str, value: object, type_: Any) -> JsonValue:
        try:
            return to_json_value(value, type_, max_bytes=self.max_payload_bytes)
        except NotJsonSerializableError as exc:
            raise JobTypeValidationError(code, self.name, str(exc)) from exc
        except msgspec.ValidationError as exc:
            raise JobTypeValidationError(code, self.name, _details(exc, type_)) from exc

    def _decode(self, code: str, value: JsonValue, type_: Any) -> Any:
        try:
            return from_json_value(value, type_)
        except msgspec.ValidationError as exc:
            raise JobTypeValidationError(code, self.name, _details(exc, type_)) from exc

    def __repr__(self) -> str:
        return f"JobType({self.name!r}, entry={self.entry})"


def _details(exc: msgspec.ValidationError, type_: Any) -> str:
    expected = getattr(type_, "__name__", None) or repr(type_)
    return f"{exc} (expected {expected})"


class JobTypes:
    """A registry slice: define job types here, merge slices with :meth:`merge`.

    ``retry``, ``lease``, ``max_attempts`` and ``timeout`` are this slice's defaults for types
    that declare none; a processor's own settings still win, and the worker's apply when
    neither is set.
    """

    def __init__(
        self,
        *,
        retry: Any | None = None,
        lease: Any | None = None,
        max_attempts: MaxAttempts = UNSET,
        timeout: timedelta | float | None = None,
    ) -> None:
        self._types: dict[str, JobType[Any, Any]] = {}
        self.retry = retry
        self.lease = lease
        self.max_attempts = validate_max_attempts(max_attempts, "JobTypes(max_attempts=...)")
        self.timeout = validate_timeout(timeout, "JobTypes(timeout=...)")

    # Two overloads, told apart by ``continues_with`` only: a tuple of job types gives mypy the
    # exact successors; anything else leaves them unchecked. ``input``/``output`` None and
    # ``entry`` are inferred by the type variables' defaults and bound, not by more overloads.
    @overload
    def define(
        self,
        name: str,
        *,
        input: type[_In] | None,
        output: type[_Out] | None,
        entry: _Entry = ...,
        continues_with: _Next,
        blockers: Iterable[str | JobType[Any, Any]] | None = ...,
        retry: Any | None = ...,
        lease: Any | None = ...,
        max_payload_bytes: int = ...,
        max_attempts: MaxAttempts = ...,
        timeout: timedelta | float | None = ...,
        fail_on: Iterable[type[BaseException]] = ...,
        runs_after_failed_blockers: bool = ...,
        priority: int = ...,
        max_running: int | None = ...,
        rate_limit: RateLimit | None = ...,
        on_failed: JobType[Any, Any] | str | None = ...,
        on_cancelled: JobType[Any, Any] | str | None = ...,
        on_chain_failed: JobType[Any, Any] | str | None = ...,
        on_chain_cancelled: JobType[Any, Any] | str | None = ...,
    ) -> JobType[_In, _Out, _Next, _Entry]: ...

    @overload
    def define(
        self,
        name: str,
        *,
        input: type[_In] | None,
        output: type[_Out] | None,
        entry: _Entry = ...,
        continues_with: _Unchecked | None = ...,
        blockers: Iterable[str | JobType[Any, Any]] | None = ...,
        retry: Any | None = ...,
        lease: Any | None = ...,
        max_payload_bytes: int = ...,
        max_attempts: MaxAttempts = ...,
        timeout: timedelta | float | None = ...,
        fail_on: Iterable[type[BaseException]] = ...,
        runs_after_failed_blockers: bool = ...,
        priority: int = ...,
        max_running: int | None = ...,
        rate_limit: RateLimit | None = ...,
        on_failed: JobType[Any, Any] | str | None = ...,
        on_cancelled: JobType[Any, Any] | str | None = ...,
        on_chain_failed: JobType[Any, Any] | str | None = ...,
        on_chain_cancelled: JobType[Any, Any] | str | None = ...,
    ) -> JobType[_In, _Out, AnyContinuation, _Entry]: ...

    def define(
        self,
        name: str,
        *,
        input: Any,
        output: Any,
        entry: bool = False,
        continues_with: Iterable[str | JobType[Any, Any]] | None = None,
        blockers: Iterable[str | JobType[Any, Any]] | None = None,
        retry: Any | None = None,
        lease: Any | None = None,
        max_payload_bytes: int = MAX_PAYLOAD_BYTES,
        max_attempts: MaxAttempts = UNSET,
        timeout: timedelta | float | None = None,
        fail_on: Iterable[type[BaseException]] = (),
        runs_after_failed_blockers: bool = False,
        priority: int = 0,
        max_running: int | None = None,
        rate_limit: RateLimit | None = None,
        on_failed: JobType[Any, Any] | str | None = None,
        on_cancelled: JobType[Any, Any] | str | None = None,
        on_chain_failed: JobType[Any, Any] | str | None = None,
        on_chain_cancelled: JobType[Any, Any] | str | None = None,
    ) -> JobType[Any, Any]:
        """Declare a job type in this slice and return it (a duplicate name is an error).

        ``on_failed=`` / ``on_cancelled=`` (and ``on_chain_failed=`` / ``on_chain_cancelled=``
        on an entry type) take a hook type defined with ``input=JobEnded`` (or its name): the
        backend starts a job of it in the transaction that fails or cancels the job (chain).
        """
        validate_type_name(name)
        if name in self._types:
            raise DuplicateJobTypeError([name])
        if not isinstance(entry, bool):
            raise InvalidArgumentError(f"entry must be True or False, got {entry!r}")
        if not isinstance(max_payload_bytes, int) or max_payload_bytes < 1:
            raise InvalidArgumentError(
                f"max_payload_bytes must be a positive integer, got {max_payload_bytes!r}"
            )
        if not isinstance(runs_after_failed_blockers, bool):
            raise InvalidArgumentError(
                f"runs_after_failed_blockers must be True or False, got {runs_after_failed_blockers!r}"
            )
        validate_priority(priority, f"{name}: priority")
        if rate_limit is not None and not isinstance(rate_limit, RateLimit):
            raise InvalidArgumentError(
                f"{name}: rate_limit must be a RateLimit(limit, per=timedelta(...)), got {rate_limit!r}"
            )
        try:
            limits = TypeLimits(max_running=max_running, rate_limit=rate_limit)
        except InvalidArgumentError as exc:
            raise InvalidArgumentError(f"{name}: {exc}") from None
        max_attempts = validate_max_attempts(max_attempts, f"{name}: max_attempts")
        checked_timeout = validate_timeout(timeout, f"{name}: timeout")
        checked_fail_on = validate_fail_on(fail_on, f"{name}: fail_on")
        hooks = {
            "on_failed": hook_name("on_failed", name, on_failed),
            "on_cancelled": hook_name("on_cancelled", name, on_cancelled),
            "on_chain_failed": hook_name("on_chain_failed", name, on_chain_failed),
            "on_chain_cancelled": hook_name("on_chain_cancelled", name, on_chain_cancelled),
        }
        if name in hooks.values():
            raise InvalidArgumentError(
                f"{name}: a type cannot be its own hook (each failure of a hook job would start another)"
            )
        if not entry and (hooks["on_chain_failed"] or hooks["on_chain_cancelled"]):
            raise InvalidArgumentError(
                f"{name}: on_chain_failed/on_chain_cancelled need entry=True (a chain's type is the "
                "type of its first job, which must be an entry type); use on_failed/on_cancelled"
            )
        job_type: JobType[Any, Any] = JobType(
            name=name,
            input_type=_declared(input, name, "input"),
            output_type=_declared(output, name, "output"),
            entry=entry,
            continues_with=_name_set("continues_with", continues_with),
            blockers=_name_set("blockers", blockers),
            retry=retry if retry is not None else self.retry,
            lease=lease if lease is not None else self.lease,
            max_payload_bytes=max_payload_bytes,
            max_attempts=max_attempts if max_attempts is not UNSET else self.max_attempts,
            timeout=checked_timeout if checked_timeout is not None else self.timeout,
            fail_on=checked_fail_on,
            runs_after_failed_blockers=runs_after_failed_blockers,
            priority=priority,
            limits=limits if (max_running is not None or rate_limit is not None) else None,
            **hooks,
        )
        self._types[name] = job_type
        return job_type

    @classmethod
    def merge(cls, *slices: JobTypes) -> JobTypes:
        """A new registry holding every type of ``slices``; a name in two slices is an error."""
        merged = cls()
        duplicates: list[str] = []
        for part in slices:
            if not isinstance(part, JobTypes):
                raise InvalidArgumentError(f"JobTypes.merge takes JobTypes slices, got {part!r}")
            for name, job_type in part._types.items():
                existing = merged._types.get(name)
                if existing is not None and existing is not job_type:
                    duplicates.append(name)
                merged._types[name] = job_type
        if duplicates:
            raise DuplicateJobTypeError(sorted(set(duplicates)))
        return merged

    def get(self, name: str) -> JobType[Any, Any]:
        """The type registered under ``name``, or UnknownJobTypeError listing the known names."""
        job_type = self._types.get(name)
        if job_type is None:
            raise UnknownJobTypeError(name, list(self._types))
        return job_type

    def resolve(self, job_type: JobType[Any, Any] | str) -> JobType[Any, Any]:
        """The registered type for a name or a JobType (which must be this registry's own)."""
        if isinstance(job_type, JobType):
            registered = self.get(job_type.name)
            if registered is not job_type:
                raise InvalidArgumentError(
                    f"job type {job_type.name!r} is not the one registered with this client "
                    "(declared in another registry with the same name); merge its slice instead"
                )
            return registered
        if isinstance(job_type, str):
            return self.get(job_type)
        raise InvalidArgumentError(f"expected a JobType or a job type name, got {job_type!r}")

    def names(self) -> list[str]:
        """Registered type names in definition order."""
        return list(self._types)

    def __contains__(self, name: object) -> bool:
        return name in self._types

    def __iter__(self) -> Iterator[JobType[Any, Any]]:
        return iter(self._types.values())

    def __len__(self) -> int:
        return len(self._types)

    def check_entry(self, job_type: JobType[Any, Any]) -> None:
        """Raise ``not_entry_point`` unless ``job_type`` may start a chain."""
        if not job_type.entry:
            raise JobTypeValidationError(
                NOT_ENTRY_POINT,
                job_type.name,
                "this type cannot start a chain; start an entry type or declare it with entry=True",
            )

    def check_continuation(self, from_type: JobType[Any, Any], to_type: JobType[Any, Any]) -> None:
        """Raise ``invalid_continuation`` unless ``from_type`` may continue with ``to_type``."""
        self.resolve(to_type)
        allowed = from_type.continues_with
        if allowed is not None and to_type.name not in allowed:
            listed = ", ".join(sorted(allowed)) or "(none: it must finish with an output)"
            raise JobTypeValidationError(
                INVALID_CONTINUATION,
                from_type.name,
                f"cannot continue with {to_type.name!r}; allowed continuations: {listed}",
            )

    def check_blockers(self, job_type: JobType[Any, Any], blocker_type_names: Iterable[str]) -> None:
        """Raise ``invalid_blockers`` unless every blocker chain type is allowed for ``job_type``."""
        allowed = job_type.blockers
        if allowed is None:
            return
        names = list(blocker_type_names)
        bad = sorted({n for n in names if n not in allowed})
        if bad:
            listed = ", ".join(sorted(allowed)) or "(none)"
            raise JobTypeValidationError(
                INVALID_BLOCKERS,
                job_type.name,
                f"chains of type {', '.join(repr(b) for b in bad)} may not block it; "
                f"allowed blocker types: {listed}",
            )


SUPPORTED_TYPES = (
    "dataclasses, TypedDict, msgspec.Struct, NamedTuple, str, int, float, bool, None, "
    "list/tuple/dict[str, Any] of these, Literal, Enum, datetime, date, time, timedelta, UUID, Decimal, "
    "attrs classes, pydantic v2 models"
)
"""What a job input or output may be declared as (named by the error for anything else)."""


def _declared(type_: Any, type_name: str = "?", which: str = "input") -> Any:
    """Normalise a declared input/output type (``None`` means the value must be None).

    Refuses, at definition, any type the JSON boundary could not encode and decode: msgspec
    builds a decoder for an arbitrary class without complaint (it would need an enc_hook and
    a dec_hook, which jobchain does not pass), so a pydantic model or a plain class used to
    pass here and fail every start with "not JSON-serializable".
    """
    if type_ is None:
        return type(None)
    where = f"{type_name}: {which} type {_type_label(type_)}"
    try:
        msgspec.json.Decoder(type_)
        info = msgspec.inspect.type_info(type_)
    except TypeError as exc:
        raise NotJsonSerializableError(
            f"{where} cannot be used as a job input or output type ({exc}); supported: {SUPPORTED_TYPES}"
        ) from None
    found = _custom_class(info, "$", set())
    if found is not None:
        cls, path = found
        if is_pydantic_model(cls):
            what = "a pydantic v1 model"
            hint = "jobchain supports pydantic v2 models (model_dump/model_validate): upgrade pydantic"
        else:
            what = "a class"
            hint = "make it a @dataclass, a msgspec.Struct or a pydantic v2 model"
        raise NotJsonSerializableError(
            f"{where} cannot be used as a job input or output type: {cls.__qualname__} at {path} "
            f"is {what} that jobchain cannot encode as JSON or decode back; {hint}; "
            f"supported: {SUPPORTED_TYPES}"
        )
    return type_


def _type_label(type_: Any) -> str:
    if isinstance(type_, type) and get_origin(type_) is None:
        return type_.__qualname__
    return repr(type_)


def _custom_class(info: msgspec.inspect.Type, path: str, seen: set[int]) -> tuple[type, str] | None:
    """The first class in ``info`` that msgspec could only handle through hooks, and its path."""
    if isinstance(info, msgspec.inspect.CustomType):
        if is_pydantic_model(info.cls) and hasattr(info.cls, "model_validate"):
            return None  # a pydantic v2 model: the JSON boundary's hooks encode and validate it
        return info.cls, path
    if id(info) in seen:  # a recursive Struct or dataclass refers back to itself
        return None
    seen.add(id(info))
    children: list[tuple[msgspec.inspect.Type, str]] = []
    if isinstance(
        info,
        (
            msgspec.inspect.DataclassType,
            msgspec.inspect.StructType,
            msgspec.inspect.TypedDictType,
            msgspec.inspect.NamedTupleType,
        ),
    ):
        children = [(f.type, f"{path}.{f.name}") for f in info.fields]
    elif isinstance(info, (msgspec.inspect.DictType, msgspec.inspect.FrozenDictType)):
        children = [(info.key_type, f"{path} (a key)"), (info.value_type, f"{path}[...]")]
    elif isinstance(info, msgspec.inspect.CollectionType):
        children = [(info.item_type, f"{path}[...]")]
    elif isinstance(info, msgspec.inspect.TupleType):
        children = [(item, f"{path}[{index}]") for index, item in enumerate(info.item_types)]
    elif isinstance(info, msgspec.inspect.UnionType):
        children = [(option, path) for option in info.types]
    elif isinstance(info, msgspec.inspect.Metadata):
        children = [(info.type, path)]
    for child, child_path in children:
        found = _custom_class(child, child_path, seen)
        if found is not None:
            return found
    return None
