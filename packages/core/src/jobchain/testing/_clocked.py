"""A state adapter seen through a clock: every operation's ``now=None`` becomes the clock's time.

The state contract lets every time-dependent operation take ``now`` (``None``: the adapter's
own clock). Filling it in at this one boundary makes a test clock authoritative on every
backend — claims, completions, continuations, unblocking, retries — without a line of
backend-specific code, and without the backends knowing about tests.

The proxies are built per wrapped class with real methods (not ``__getattr__``), so the
runtime protocol checks (``isinstance(state, RunsOperationsAlone)``, ``CompletesJobsInBatches``)
see exactly the abilities of the wrapped object, on every Python version.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from datetime import datetime
from typing import Any, cast

from jobchain.contracts import StateAdapter

Clock = Callable[[], datetime]

# Methods that open a scope yielding a transaction: the yielded transaction is wrapped too.
_SCOPES = frozenset({"transaction", "autocommit", "savepoint"})
_DATA = ("capabilities", "time_precision")

_classes: dict[type, type] = {}


def clocked_state(state: StateAdapter, clock: Clock) -> StateAdapter:
    """``state`` with every operation's missing ``now`` taken from ``clock``."""
    return cast(StateAdapter, _wrap(state, clock))


def _wrap(inner: object, clock: Clock) -> object:
    proxy_class = _classes.get(type(inner))
    if proxy_class is None:
        proxy_class = _classes[type(inner)] = _proxy_class(type(inner))
    proxy: Any = object.__new__(proxy_class)
    proxy._inner = inner
    proxy._clock = clock
    return proxy


def _proxy_class(inner_class: type) -> type:
    namespace: dict[str, Any] = {
        "__slots__": ("_inner", "_clock"),
        "__repr__": _repr,
        "__getattr__": _forward_dynamic,
    }
    for name in dir(inner_class):
        if name.startswith("_"):
            continue
        member = getattr(inner_class, name)
        if name in _DATA or isinstance(member, property) or not callable(member):
            namespace[name] = _forward_data(name)
        elif name in _SCOPES:
            namespace[name] = _forward_scope(name)
        else:
            namespace[name] = _forward_call(name)
    for name in _DATA:  # instance attributes of the adapter, absent from its class
        namespace.setdefault(name, _forward_data(name))
    return type(f"Clocked{inner_class.__name__}", (), namespace)


def _forward_dynamic(self: Any, name: str) -> Any:
    # An operation the wrapped object provides only through its own __getattr__ (a test
    # wrapper that forwards everything) gets the clock too, instead of losing it silently.
    if name.startswith("_"):
        raise AttributeError(name)
    target = getattr(self._inner, name)
    if not callable(target):
        return target
    clock: Clock = self._clock
    if name in _SCOPES:
        return lambda *args, **kwargs: _scope(target(*args, **kwargs), clock)

    def method(*args: Any, **kwargs: Any) -> Any:
        return target(*(_with_now(a, clock) for a in args), **kwargs)

    return method


def _forward_data(name: str) -> property:
    return property(lambda self: getattr(self._inner, name))


def _forward_call(name: str) -> Callable[..., Any]:
    def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        clock: Clock = self._clock
        return getattr(self._inner, name)(*(_with_now(a, clock) for a in args), **kwargs)

    method.__name__ = name
    return method


def _forward_scope(name: str) -> Callable[..., AbstractAsyncContextManager[Any]]:
    def method(self: Any, *args: Any, **kwargs: Any) -> AbstractAsyncContextManager[Any]:
        return _scope(getattr(self._inner, name)(*args, **kwargs), self._clock)

    method.__name__ = name
    return method


@asynccontextmanager
async def _scope(opened: AbstractAsyncContextManager[Any], clock: Clock) -> AsyncIterator[Any]:
    async with opened as tx:
        yield _wrap(tx, clock)


def _with_now(value: object, clock: Clock) -> object:
    if isinstance(value, (list, tuple)):
        return type(value)(_with_now(v, clock) for v in value)
    if (
        dataclasses.is_dataclass(value)
        and not isinstance(value, type)
        and getattr(value, "now", 0) is None
        and any(f.name == "now" for f in dataclasses.fields(value))
    ):
        return dataclasses.replace(value, now=clock())
    return value


def _repr(self: Any) -> str:
    return f"<clocked {self._inner!r}>"
