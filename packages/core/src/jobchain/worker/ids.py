"""Worker ids: a readable name plus a random suffix."""

from __future__ import annotations

import re
import uuid

from jobchain.errors import InvalidArgumentError

_NAME = re.compile(r"[A-Za-z0-9._-]{1,100}")
"""Matched whole (``fullmatch``): ``$`` would also accept a trailing newline, a forged log line."""


def make_worker_id(name: str) -> str:
    """``name-<12 hex>``; the name must match ``[A-Za-z0-9._-]{1,100}``."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise InvalidArgumentError(
            f"worker name {name!r} must be 1-100 characters of letters, digits, '.', '_' or '-'"
        )
    return f"{name}-{uuid.uuid4().hex[:12]}"
