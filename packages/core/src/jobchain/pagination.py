"""Opaque keyset cursors shared by every adapter, bound to the query that produced them.

A cursor is base64url JSON carrying the listing kind, a fingerprint of the filters and
order, and the keyset position ``(sort value, id)``. Passing a cursor to a different
query (other kind, filters or order) raises :class:`InvalidCursorError`.
"""

from __future__ import annotations

import base64
import hashlib
import json
from dataclasses import fields
from datetime import datetime
from typing import Any

from jobchain.errors import InvalidCursorError
from jobchain.stored_text import MAX_KEY_CHARS, unstorable_reason

MAX_CURSOR_CHARS = 1024
"""Longer cursors are refused unread (a real one is under 200 characters)."""
MAX_SORT_TEXT_CHARS = 64
"""A sort value in text is a timestamp (about 32 characters)."""
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


def query_fingerprint(params: Any) -> str:
    """A short stable hash of a listing's params, excluding cursor and limit."""
    parts: dict[str, Any] = {}
    for f in fields(params):
        if f.name in ("cursor", "limit"):
            continue
        value = getattr(params, f.name)
        if isinstance(value, datetime):
            value = value.isoformat()
        elif isinstance(value, (list, tuple)):
            value = sorted(str(v) for v in value)
        parts[f.name] = value
    raw = json.dumps([type(params).__name__, parts], sort_keys=True, default=str)
    return hashlib.sha256(raw.encode()).hexdigest()[:16]


def encode_cursor(params: Any, sort_value: str | int, item_id: str) -> str:
    """The cursor pointing after the item with ``(sort_value, item_id)``."""
    payload = {"q": query_fingerprint(params), "k": [sort_value, item_id]}
    raw = json.dumps(payload, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(params: Any) -> tuple[str | int, str] | None:
    """The keyset position carried by ``params.cursor`` (None when there is no cursor).

    What it returns can be bound by every backend: an int64, a short storable string, a
    storable id of at most 255 characters. Anything else, tampered or forged, is an
    :class:`InvalidCursorError`; the cursor itself is never echoed (it is caller input).
    """
    cursor = params.cursor
    if cursor is None:
        return None
    if not isinstance(cursor, str) or not cursor:
        raise InvalidCursorError(f"cursor must be a next_cursor string, got {type(cursor).__name__}")
    if len(cursor) > MAX_CURSOR_CHARS:
        raise InvalidCursorError(
            f"cursor is longer than {MAX_CURSOR_CHARS} characters, so not a jobchain cursor; "
            "pass the next_cursor of the previous page"
        )
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        payload = json.loads(base64.urlsafe_b64decode(padded.encode()))
        fingerprint = payload["q"]
        sort_value, item_id = payload["k"]
    except (ValueError, KeyError, TypeError):
        raise InvalidCursorError(
            "cursor is not a jobchain cursor; pass the next_cursor of the previous page"
        ) from None
    if fingerprint != query_fingerprint(params):
        raise InvalidCursorError(
            "cursor belongs to a different query (other filters, order or listing); "
            "pass the next_cursor of the previous page of this same query"
        )
    if not (_bindable_sort_value(sort_value) and _bindable_text(item_id, MAX_KEY_CHARS)):
        raise InvalidCursorError("cursor is malformed; pass the next_cursor of the previous page")
    return sort_value, item_id


def _bindable_sort_value(value: object) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return _INT64_MIN <= value <= _INT64_MAX
    return _bindable_text(value, MAX_SORT_TEXT_CHARS)


def _bindable_text(value: object, limit: int) -> bool:
    return isinstance(value, str) and len(value) <= limit and unstorable_reason(value) is None
