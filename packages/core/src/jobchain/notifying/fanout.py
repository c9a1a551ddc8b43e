"""The listeners of one channel, keyed by the payload each waits for (type name, chain id, job id)."""

from __future__ import annotations

import itertools
import logging
from collections.abc import Iterable

from jobchain.contracts.notify import Listener


class Fanout:
    """One shared subscription's listeners; dispatch isolates every listener from the others."""

    def __init__(self, logger: logging.Logger) -> None:
        self._logger = logger
        self._by_key: dict[str, dict[int, Listener]] = {}
        self._keys_of: dict[int, tuple[str, ...]] = {}
        self._tokens = itertools.count(1)

    def __len__(self) -> int:
        return len(self._keys_of)

    def add(self, keys: Iterable[str], listener: Listener) -> int:
        """Register ``listener`` for ``keys``; returns a token for :meth:`remove`."""
        token = next(self._tokens)
        unique = tuple(dict.fromkeys(keys))
        self._keys_of[token] = unique
        for key in unique:
            self._by_key.setdefault(key, {})[token] = listener
        return token

    def remove(self, token: int) -> bool:
        """Drop a registration; False if it was already gone."""
        keys = self._keys_of.pop(token, None)
        if keys is None:
            return False
        for key in keys:
            listeners = self._by_key.get(key)
            if listeners is not None:
                listeners.pop(token, None)
                if not listeners:
                    del self._by_key[key]
        return True

    def clear(self) -> None:
        self._by_key.clear()
        self._keys_of.clear()

    def dispatch(self, payload: str) -> None:
        """Call every listener waiting for ``payload``; an exception is logged, never propagated."""
        listeners = self._by_key.get(payload)
        if not listeners:
            return
        for listener in tuple(listeners.values()):
            try:
                listener(payload)
            except Exception:
                self._logger.exception("jobchain notify listener %r failed on %r", listener, payload)
