"""Error fingerprints: one key for the errors that differ only in the values they carry.

A handler that raises ``CardExpired(f"card for order {ref} expired on {date}")`` stores a
different message for every order. Grouped by exact message, 44 such failures are 44 rows of
one; grouped by fingerprint they are one row of 44::

    >>> error_fingerprint("CardExpired", "card for order ORD-10442 expired on 11/2026")
    'CardExpired: card for order <id> expired on <n>'

The fingerprint is the error type, ``": "``, and the first non-blank line of the message with
its whitespace collapsed and these values masked, in this order:

- a double-quoted value (``"sku-1"``) becomes ``"<v>"``, a single-quoted one (``'img'``, as
  in a ``KeyError``) ``'<v>'``;
- a UUID (a job id) becomes ``<uuid>``;
- a date, or a date and time in ISO 8601 (``2026-11-30T08:15:00Z``), becomes ``<time>``;
- ``0x`` and hex digits (``0x7f3a``), or 8 hex digits or more that mix digits and letters
  (``9f86d081e4``), become ``<hex>``;
- a word that mixes letters and digits, ``-`` and ``_`` joining (``ORD-10442``, ``user42``,
  ``30s``), becomes ``<id>``;
- a number, ``.``, ``,``, ``:``, ``/`` or ``-`` joining its digits (``42``, ``3.5``,
  ``11/2026``, ``08:15``), becomes ``<n>``.

A quote opens a value only where no letter or digit precedes it, and closes one only where
none follows, so the apostrophe of ``can't`` is left alone. Only ASCII letters, digits and
whitespace count as such: the rules are :data:`RULES`, regular expressions written to mean
the same in Python's ``re`` and in Java's ``java.util.regex`` (explicit classes, no ``\\w``,
``\\d``, ``\\s``, ``\\b`` nor case-insensitive flags, whose meanings differ between the two),
so that ``jobchain-spark`` computes the same fingerprints with Spark SQL's ``regexp_replace``
in its executors. A fingerprint longer than :data:`MAX_FINGERPRINT` characters is cut there
with ``…``.

A message without a type gives its masked line alone; an empty one gives the type alone, and
``(empty error)`` when there is neither.
"""

from __future__ import annotations

import re
from typing import Final

MAX_FINGERPRINT: Final = 200
"""Characters of a fingerprint at most (the last one ``…`` when it was cut)."""
EMPTY: Final = "(empty error)"
"""The fingerprint of an error with neither a type nor a message."""

_SPACE: Final = r"[ \t\n\r\f\x0B]"
_WORD: Final = r"[A-Za-z0-9_]"
_TOKEN: Final = r"[A-Za-z0-9_\-]"
_HEX: Final = r"[0-9a-fA-F]"

FIRST_LINE: Final = rf"^{_SPACE}*([^\n]*)"
"""Group 1 is the first line that is not blank (leading blank lines and indentation skipped)."""
WHITESPACE: Final = rf"{_SPACE}+"
"""A run of whitespace, collapsed to one space."""

RULES: Final[tuple[tuple[str, str], ...]] = (
    (rf'(?<!{_WORD})"[^"]*"(?!{_WORD})', '"<v>"'),
    (rf"(?<!{_WORD})'[^']*'(?!{_WORD})", "'<v>'"),
    (rf"(?<!{_WORD}){_HEX}{{8}}-{_HEX}{{4}}-{_HEX}{{4}}-{_HEX}{{4}}-{_HEX}{{12}}(?!{_WORD})", "<uuid>"),
    (
        rf"(?<!{_WORD})[0-9]{{4}}-[0-9]{{2}}-[0-9]{{2}}"
        rf"(?:[T ][0-9]{{2}}:[0-9]{{2}}(?::[0-9]{{2}}(?:\.[0-9]+)?)?(?:Z|[+\-][0-9]{{2}}:?[0-9]{{2}})?)?"
        rf"(?!{_WORD})",
        "<time>",
    ),
    (rf"(?<!{_WORD})0[xX]{_HEX}+(?!{_WORD})", "<hex>"),
    (rf"(?<!{_WORD})(?={_HEX}*[0-9])(?={_HEX}*[a-fA-F]){_HEX}{{8,}}(?!{_WORD})", "<hex>"),
    (rf"(?<!{_TOKEN})(?={_TOKEN}*[0-9])(?={_TOKEN}*[A-Za-z]){_TOKEN}+(?!{_TOKEN})", "<id>"),
    (rf"(?<!{_WORD})[0-9]+(?:[.,:/\-][0-9]+)*(?!{_WORD})", "<n>"),
)
"""(pattern, replacement) pairs applied in order, each to every match (``re.sub``, Spark's
``regexp_replace``). Valid and equal in meaning in Python and Java regular expressions; the
replacements contain neither ``$`` nor ``\\``, special in Java's replacement strings."""

_FIRST_LINE_RE: Final = re.compile(FIRST_LINE)
_WHITESPACE_RE: Final = re.compile(WHITESPACE)
_RULES_RE: Final = tuple((re.compile(pattern), replacement) for pattern, replacement in RULES)


def first_line(message: str | None) -> str:
    """The first line of ``message`` that is not blank, whitespace collapsed, ends trimmed."""
    match = _FIRST_LINE_RE.match(message or "")
    line = match.group(1) if match else ""
    return _WHITESPACE_RE.sub(" ", line).strip(" ")


def mask_values(text: str) -> str:
    """``text`` with every value of :data:`RULES` masked (no line or whitespace handling)."""
    for pattern, replacement in _RULES_RE:
        text = pattern.sub(replacement, text)
    return text


def cut(text: str, size: int = MAX_FINGERPRINT) -> str:
    """``text`` if it has ``size`` characters at most, else its first ``size - 1`` and ``…``."""
    return text if len(text) <= size else text[: size - 1] + "…"


def _joined(kind: str, line: str) -> str:
    if kind and line:
        return cut(f"{kind}: {line}")
    return cut(kind or line or EMPTY)


def error_fingerprint(error_type: str | None, message: str | None) -> str:
    """The group key of an error: ``"CardExpired: card for order <id> expired on <n>"``.

    ``error_type`` is the exception's type name (``""`` or None for a plain message) and
    ``message`` its message; only its first non-blank line is read. See the module docstring
    for what is masked.
    """
    return _joined(error_type or "", mask_values(first_line(message)))


def error_line(error_type: str | None, message: str | None) -> str:
    """The error as one line, nothing masked: ``"CardExpired: card for order ORD-7 expired"``.

    What a group of errors shows as its example: the type and the first non-blank line of
    the message, cut as a fingerprint is.
    """
    return _joined(error_type or "", first_line(message))


__all__ = [
    "EMPTY",
    "FIRST_LINE",
    "MAX_FINGERPRINT",
    "RULES",
    "WHITESPACE",
    "cut",
    "error_fingerprint",
    "error_line",
    "first_line",
    "mask_values",
]
