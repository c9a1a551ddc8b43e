"""The text every backend can store: no NUL character, no lone surrogate.

PostgreSQL refuses ``\\x00`` in ``text`` and ``jsonb``; SQLite and PostgreSQL store UTF-8, which
has no encoding for a lone surrogate (``"\\ud800"``, what ``json.loads`` returns for a JSON
string holding a broken pair). Keys and names are checked here before anything is sent, so all
backends refuse the same values with the same :class:`InvalidArgumentError`, and text the
library writes on its own behalf (error messages, tracebacks) is made storable instead.
"""

from __future__ import annotations

from jobchain.errors import InvalidArgumentError

MAX_KEY_CHARS = 255
"""Longest deduplication or ordering key, in characters, on every backend (a PostgreSQL index
entry holds at most about 2.7 KB: 255 characters of up to 4 bytes fit with the type name)."""


def unstorable_reason(text: str) -> str | None:
    """What makes ``text`` unstorable (``"a NUL character at index 3"``), or None if it is fine."""
    nul = text.find("\x00")
    if nul >= 0:
        return f"a NUL character (\\x00) at index {nul}"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return f"a lone surrogate (\\u{ord(text[exc.start]):04x}) at index {exc.start}"
    return None


def check_storable(field: str, text: str) -> str:
    """Return ``text``, or raise :class:`InvalidArgumentError` naming ``field`` and the fix.

    The message names the position, never the value: it may be a secret or hostile.
    """
    reason = unstorable_reason(text)
    if reason is not None:
        raise InvalidArgumentError(
            f"{field} holds {reason}, which no backend can store: remove it, or repair the text "
            "first (for example text.encode('utf-8', 'replace').decode('utf-8'))"
        )
    return text


def check_key(field: str, value: object) -> str:
    """A deduplication or ordering key: a non-empty, storable string of at most 255 characters."""
    if not isinstance(value, str) or not value:
        raise InvalidArgumentError(f"{field} must be a non-empty string, got {type(value).__name__}")
    if len(value) > MAX_KEY_CHARS:
        raise InvalidArgumentError(
            f"{field} must be at most {MAX_KEY_CHARS} characters, got {len(value)}: "
            "use a shorter key (an id or a hash of the natural key)"
        )
    return check_storable(field, value)


def storable(text: str) -> str:
    """``text`` with NUL and lone surrogates written as escapes (``\\x00``, ``\\ud800``)."""
    if unstorable_reason(text) is None:
        return text
    return text.replace("\x00", "\\x00").encode("utf-8", "backslashreplace").decode("utf-8")
