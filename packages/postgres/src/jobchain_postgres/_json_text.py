"""JSON text for ``::jsonb`` parameters that keeps every number's JSON type.

``jsonb`` stores a number as ``numeric``, which keeps the digits it was given and nothing
else: ``1e+16`` (Python's text for the float 1e16) parses as the integer 10000000000000000
with scale 0, so it comes back without a decimal point and ``json.loads`` returns an int. A
float written positionally with a fraction (``10000000000000000.0``) keeps scale 1 and comes
back a float of the same value. Only a positive exponent loses the fraction: ``1e-05`` parses
with scale 5 and comes back ``0.00001``, a float.
"""

from __future__ import annotations

import json
import re
from decimal import Decimal

from jobchain.entities import JsonValue
from jobchain.errors import InvalidArgumentError

# A JSON string (skipped whole, so text inside it is never touched) or a number with a
# positive exponent; json.dumps writes an exponent only for a float, never for an int.
_STRING_OR_EXPONENT = re.compile(r'"(?:[^"\\]|\\.)*"|\d+(?:\.\d+)?e\+\d+')


def _positional(match: re.Match[str]) -> str:
    token = match.group()
    if token[0] == '"':
        return token
    # The shortest repr's digits written out (at most 17 significant digits and an exponent
    # up to 308: ~310 characters); float() of that text is the same float.
    text = format(Decimal(token), "f")
    return text if "." in text else text + ".0"


def json_text(value: JsonValue) -> str:
    """``value`` as JSON text for a ``::jsonb`` parameter; floats come back floats.

    A float Python writes with a positive exponent (``1e+16``, ``1.5e+300``) is written
    positionally with a fraction instead, so ``numeric`` keeps a scale; every other number,
    and every string, is the plain ``json.dumps`` text. The rewrite runs only when the text
    holds ``e+`` at all, so a document without such a float costs one substring search.
    """
    try:
        text = json.dumps(value, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        raise InvalidArgumentError(f"value is not JSON-serializable: {exc}") from None
    if "e+" not in text:
        return text
    return _STRING_OR_EXPONENT.sub(_positional, text)


__all__ = ["json_text"]
