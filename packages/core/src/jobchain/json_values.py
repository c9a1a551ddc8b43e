"""JSON boundary helpers: turn typed values into plain JSON values and back.

Everything a job stores (input, output) passes through :func:`to_json_value` before it
reaches a state adapter, so every backend receives the same plain ``dict``/``list``/
``str``/``int``/``float``/``bool``/``None`` tree and never sees a Python object it would
serialize differently. msgspec does the encoding and the shape validation; this module adds
the checks JSON itself cannot express (NaN and infinity, sets and bytes that msgspec would
silently turn into arrays and base64 strings, strings holding NUL or a lone surrogate that
PostgreSQL or UTF-8 cannot store) and a size limit.

pydantic v2 models (``jobchain[pydantic]``) pass through hooks: encoded as
``model_dump(mode="json")``, decoded and validated by ``model_validate``, so a pydantic
validation error is a ``msgspec.ValidationError`` naming the path like any other. pydantic is
never imported here: a model is recognised by its class.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import msgspec

from jobchain.entities import JsonValue
from jobchain.errors import NotJsonSerializableError
from jobchain.stored_text import storable, unstorable_reason

MAX_PAYLOAD_BYTES = 8 * 1024 * 1024
"""Default upper bound for one encoded input or output (8 MiB)."""

_MAX_DEPTH = 256


def is_pydantic_model(cls: object) -> bool:
    """Whether ``cls`` is a pydantic model class (v1 or v2), without importing pydantic."""
    return isinstance(cls, type) and any(base.__module__.split(".")[0] == "pydantic" for base in cls.__mro__)


def _enc_hook(value: object) -> object:
    if is_pydantic_model(type(value)) and hasattr(value, "model_dump"):
        return value.model_dump(mode="json")
    raise TypeError(f"Encoding objects of type {type(value).__name__} is unsupported")


def _dec_hook(type_: Any, value: object) -> object:
    if is_pydantic_model(type_) and hasattr(type_, "model_validate"):
        try:
            return type_.model_validate(value)
        except ValueError as exc:
            # pydantic's ValidationError: one line per error, no documentation links.
            errors = getattr(exc, "errors", None)
            if not callable(errors):
                raise
            raise ValueError("; ".join(_pydantic_error(error) for error in errors())) from None
    raise NotImplementedError


def _pydantic_error(error: dict[str, Any]) -> str:
    where = ""
    for part in error.get("loc", ()):
        where += f"[{part}]" if isinstance(part, int) else f".{part}"
    return f"{where.lstrip('.') or 'value'}: {error.get('msg', 'invalid')}"


def _check_plain(value: object, path: str, depth: int = 0) -> None:
    """Reject values JSON cannot carry unchanged, naming the first offending path."""
    if depth > _MAX_DEPTH:
        raise NotJsonSerializableError(f"not JSON-serializable: nesting deeper than {_MAX_DEPTH} at {path}")
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            raise NotJsonSerializableError(
                f"not JSON-serializable: {value!r} at {path}; JSON has no NaN or infinity, "
                "use None or a finite number"
            )
    elif isinstance(value, (int, bool)) or value is None:
        return
    elif isinstance(value, str):
        _check_text(value, path)
    elif isinstance(value, dict):
        for key, item in value.items():
            if isinstance(key, str):
                _check_text(key, f"{path} (a key)")
            _check_plain(item, f"{path}.{_printable(key)}", depth + 1)
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            _check_plain(item, f"{path}[{index}]", depth + 1)
    elif isinstance(value, (set, frozenset)):
        raise NotJsonSerializableError(
            f"not JSON-serializable: a {type(value).__name__} at {path}; use a list instead"
        )
    elif isinstance(value, (bytes, bytearray, memoryview)):
        raise NotJsonSerializableError(
            f"not JSON-serializable: {type(value).__name__} at {path}; encode it as a string "
            "(for example base64) first"
        )
    elif isinstance(value, msgspec.Struct):
        for name in value.__struct_fields__:
            _check_plain(getattr(value, name), f"{path}.{name}", depth + 1)
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        for f in dataclasses.fields(value):
            _check_plain(getattr(value, f.name), f"{path}.{f.name}", depth + 1)
    elif is_pydantic_model(type(value)) and hasattr(value, "model_dump"):
        _check_plain(value.model_dump(mode="json"), path, depth)
    # Anything else (datetime, UUID, Decimal, Enum, unsupported objects) is left to msgspec,
    # which either encodes it in a well-defined way or raises TypeError below.


def _printable(key: object) -> str:
    return storable(key) if isinstance(key, str) else repr(key)


def _check_text(text: str, path: str) -> None:
    reason = unstorable_reason(text)
    if reason is not None:
        raise NotJsonSerializableError(
            f"not storable: the string at {path} holds {reason}, which no backend can store; "
            "remove it, or repair the text first (text.encode('utf-8', 'replace').decode('utf-8'))"
        )


def _plain(value: object, depth: int = 0) -> bool:
    """Whether ``value`` passes every check of :func:`_check_plain`, building no path.

    The hot path: every input and output goes through it. Lone surrogates are left to msgspec,
    which raises ``UnicodeEncodeError`` for them; only a value that fails is walked again by
    ``_check_plain`` to name the offending path.
    """
    kind = type(value)
    if kind is str:
        return "\x00" not in value  # type: ignore[operator]  # kind is str
    if kind is int or kind is bool or value is None:
        return True
    if kind is float:
        return math.isfinite(value)  # type: ignore[arg-type]  # kind is float
    if depth >= _MAX_DEPTH:
        return False
    if kind is dict:
        for key, item in value.items():  # type: ignore[attr-defined]  # kind is dict
            if (type(key) is str and "\x00" in key) or not _plain(item, depth + 1):
                return False
        return True
    if kind is list or kind is tuple:
        return all(_plain(item, depth + 1) for item in value)  # type: ignore[attr-defined]
    return False  # anything else: the full check decides


def encode_json(value: object, *, max_bytes: int = MAX_PAYLOAD_BYTES) -> bytes:
    """Encode ``value`` as JSON bytes or raise :class:`NotJsonSerializableError` saying why."""
    if not _plain(value):
        _check_plain(value, "$")
    try:
        raw = msgspec.json.encode(value, enc_hook=_enc_hook)
    except UnicodeEncodeError:
        _check_plain(value, "$")  # names the path of the lone surrogate
        raise NotJsonSerializableError(
            "not storable: a string holds a lone surrogate, which no backend can store; "
            "repair the text first (text.encode('utf-8', 'replace').decode('utf-8'))"
        ) from None
    except (TypeError, OverflowError) as exc:
        raise NotJsonSerializableError(
            f"not JSON-serializable: {exc}; pass dicts, lists, strings, numbers, booleans, None "
            "or dataclasses of them"
        ) from None
    if len(raw) > max_bytes:
        raise NotJsonSerializableError(
            f"payload is {len(raw)} bytes encoded, more than the {max_bytes}-byte limit; "
            "store large data elsewhere and pass a reference"
        )
    return raw


def to_json_value(value: object, type_: Any = Any, *, max_bytes: int = MAX_PAYLOAD_BYTES) -> JsonValue:
    """Validate ``value`` against ``type_`` and return it as a plain JSON value.

    Raises :class:`NotJsonSerializableError` for values JSON cannot carry (NaN, infinity,
    sets, bytes, arbitrary objects, oversized payloads) and ``msgspec.ValidationError``
    (whose message names the field, e.g. ``$.count``) when the shape does not match.
    """
    raw = encode_json(value, max_bytes=max_bytes)
    if type_ is not Any:
        msgspec.json.decode(raw, type=type_, dec_hook=_dec_hook)
    return msgspec.json.decode(raw)


def from_json_value(value: JsonValue, type_: Any) -> Any:
    """Decode a stored JSON value into ``type_`` (raises ``msgspec.ValidationError``)."""
    if type_ is Any:
        return value
    return msgspec.json.decode(msgspec.json.encode(value), type=type_, dec_hook=_dec_hook)
