"""How the adapter's own connections turn stored text into ``str``: never failing.

jobchain refuses NUL and lone surrogates before anything is written (``jobchain.stored_text``),
but versions before that wrote keys through SQLite's JSON functions, which store the escape
``"\\ud800"`` as bytes that are not UTF-8. sqlite3's default decoding raises on such a column
and leaves its statement in progress, so one old row stopped the worker, the reaper and every
listing. Decoding with U+FFFD in place of the bad bytes keeps every read working; the value
read back is a valid string, so writing it again stores valid UTF-8.
"""

from __future__ import annotations

from typing import Final

_decode: Final = bytes.decode


def read_text(raw: bytes) -> str:
    """``raw`` as UTF-8, each invalid byte sequence replaced by U+FFFD (sqlite3 text_factory)."""
    return _decode(raw, "utf-8", "replace")


__all__ = ["read_text"]
