"""Wake-hint budgets in a JetStream key-value bucket, updated by revision compare-and-swap.

Key: ``{prefix}.hint.{encoded type name}``; value: the remaining budget as ASCII digits.
The bucket's TTL (max age) expires a budget that nobody touched for ``kv_ttl``; every
provide and consume writes a new revision, which refreshes it.

* provide: create the key if missing, else ``update(current + n, last=revision)``;
* consume: missing key → wake; value <= 0 → don't; else ``update(value - 1, last=revision)`` → wake.

Both retry on a wrong-last-sequence answer at most ``attempts`` times. An exhausted consume
returns False (other workers are claiming the same budget right now); an exhausted provide
deletes the key, so that every listener wakes (no budget tracked) rather than too few.
"""

from __future__ import annotations

import string
from typing import Final

from nats.js.errors import KeyNotFoundError, KeyWrongLastSequenceError
from nats.js.kv import KeyValue

_PLAIN: Final = frozenset(string.ascii_letters + string.digits + "_-")


def encode_key_token(text: str) -> str:
    """Encode ``text`` into KV-key characters, injectively: other bytes become ``=XX`` (hex)."""
    out: list[str] = []
    for char in text:
        if char in _PLAIN:
            out.append(char)
        else:
            out.extend(f"={byte:02X}" for byte in char.encode("utf-8"))
    return "".join(out)


class KvWakeHints:
    """The provide/consume pair on one bound bucket."""

    def __init__(self, kv: KeyValue, prefix: str, *, attempts: int = 5) -> None:
        self._kv = kv
        self._prefix = prefix
        self._attempts = attempts

    def key(self, type_name: str) -> str:
        return f"{self._prefix}.hint.{encode_key_token(type_name)}"

    async def provide(self, type_name: str, count: int) -> bool:
        """Add ``count`` to the budget; False if contention exhausted the CAS retries."""
        key = self.key(type_name)
        for _ in range(self._attempts):
            try:
                entry = await self._kv.get(key)
            except KeyNotFoundError:  # also a deleted or purged key
                try:
                    await self._kv.create(key, str(count).encode())
                except KeyWrongLastSequenceError:
                    continue
                return True
            current = _budget(entry.value)
            try:
                await self._kv.update(key, str(max(current or 0, 0) + count).encode(), last=entry.revision)
            except KeyWrongLastSequenceError:
                continue
            return True
        # Fail open: a missing key means "no budget tracked", so every listener wakes.
        await self._kv.delete(key)
        return False

    async def consume(self, type_name: str) -> bool:
        """Claim one slot: True on a claim or when no budget is tracked; False when exhausted."""
        key = self.key(type_name)
        for _ in range(self._attempts):
            try:
                entry = await self._kv.get(key)
            except KeyNotFoundError:
                return True
            current = _budget(entry.value)
            if current is None:
                return True
            if current <= 0:
                return False
            try:
                await self._kv.update(key, str(current - 1).encode(), last=entry.revision)
            except KeyWrongLastSequenceError:
                continue
            return True
        return False


def _budget(value: bytes | None) -> int | None:
    """The stored budget, or None when the value is not a number (treated as "not tracked")."""
    try:
        return int(value or b"")
    except ValueError:
        return None
