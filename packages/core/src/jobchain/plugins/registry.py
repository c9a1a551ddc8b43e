"""The (scheme, role) → BackendSpec table, and lazy import of the factories it names.

Entries come from the plugins' ``jobchain_backends`` hooks and from ``register()`` calls.
Choosing a backend is a plain dictionary lookup: a pair claimed twice is an error, never a
winner picked by load order.
"""

from __future__ import annotations

import importlib
import inspect
import threading
from collections.abc import Awaitable, Callable, Iterable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from typing import cast

from jobchain.errors import (
    BackendConflictError,
    BackendUnavailableError,
    InvalidArgumentError,
    UnknownSchemeError,
)
from jobchain.plugins.hookspecs import ROLES, BackendSpec, Role
from jobchain.plugins.known import distribution_for, roles_known_for
from jobchain.plugins.manager import LoadedPlugins, PluginFailure, get_loaded_plugins
from jobchain.url import BackendURL

Factory = Callable[[BackendURL], Awaitable[object]]
"""What a ``"module:attr"`` factory string names: ``async def open_…_adapter(url) -> adapter``."""

SyncFactory = Callable[[BackendURL], object]
"""What a ``sync_factory`` string names: ``def open_sync_state_adapter(url) -> StateAdapter``."""

Scratch = Callable[[BackendURL], AbstractContextManager[str]]
"""What a ``scratch`` string names: ``def scratch(url) -> ContextManager[str]`` (a private URL)."""


@dataclass(frozen=True, slots=True)
class RegisteredBackend:
    """A BackendSpec and where it was declared (for conflict messages and ``jobchain backends``)."""

    spec: BackendSpec
    origin: str


class BackendRegistry:
    """Maps (scheme, role) to the one BackendSpec that serves it."""

    def __init__(
        self, entries: Iterable[RegisteredBackend] = (), failures: Iterable[PluginFailure] = ()
    ) -> None:
        self._entries: dict[tuple[str, Role], RegisteredBackend] = {}
        self.failures: tuple[PluginFailure, ...] = tuple(failures)
        """Plugins whose module failed to import; named in UnknownSchemeError messages."""
        for entry in entries:
            self._add(entry)

    @classmethod
    def from_plugins(cls, loaded: LoadedPlugins) -> BackendRegistry:
        """Build the table from every plugin's ``jobchain_backends`` hook.

        Raises BackendConflictError when two plugins claim the same (scheme, role).
        """
        registry = cls(failures=loaded.failures)
        # Call each implementation on its own (not the fan-out hook) to know who declared what.
        for impl in loaded.manager.hook.jobchain_backends.get_hookimpls():
            source = loaded.sources.get(impl.plugin_name)
            origin = f"plugin {impl.plugin_name!r}"
            if source is not None and source.distribution is not None:
                origin += f" from {source.distribution} {source.version or ''}".rstrip()
            specs = impl.function()
            if not isinstance(specs, Sequence) or not all(isinstance(s, BackendSpec) for s in specs):
                raise InvalidArgumentError(
                    f"{origin} returned {specs!r} from jobchain_backends; expected a list of BackendSpec"
                )
            for spec in specs:
                registry._add(RegisteredBackend(cast(BackendSpec, spec), origin))
        return registry

    def register(self, spec: BackendSpec, *, origin: str = "register()") -> None:
        """Add a backend without packaging (tests, embedders); a taken pair raises BackendConflictError."""
        self._add(RegisteredBackend(spec, origin))

    def unregister(self, scheme: str, role: Role) -> None:
        """Remove the entry for (scheme, role) if there is one."""
        self._entries.pop((scheme, role), None)

    def _add(self, entry: RegisteredBackend) -> None:
        key = (entry.spec.scheme, entry.spec.role)
        existing = self._entries.get(key)
        if existing is not None and existing.spec != entry.spec:
            first, second = sorted((existing, entry), key=lambda e: (e.spec.distribution, e.origin))
            raise BackendConflictError(
                f"{key[0]}:// ({key[1]}) is claimed by two backends: {_describe(first)} and "
                f"{_describe(second)}; uninstall one of them"
            )
        self._entries[key] = entry

    def lookup(self, scheme: str, role: Role) -> BackendSpec:
        """The spec serving ``scheme`` for ``role``; UnknownSchemeError says what to install."""
        entry = self._entries.get((scheme, role))
        if entry is None:
            raise UnknownSchemeError(self._unknown_message(scheme, role))
        return entry.spec

    def schemes(self, role: Role) -> list[str]:
        """Installed schemes for ``role``, sorted."""
        return sorted(scheme for scheme, r in self._entries if r == role)

    def entries(self) -> list[RegisteredBackend]:
        """Every entry, sorted by scheme then role (state before notify)."""
        return sorted(self._entries.values(), key=lambda e: (e.spec.scheme, ROLES.index(e.spec.role)))

    async def open(self, url: BackendURL, role: Role) -> object:
        """Import the factory for ``url``'s scheme on first use and await it with ``url``."""
        spec = self.lookup(url.scheme, role)
        result = load_factory(spec)(url)
        if not inspect.isawaitable(result):
            raise InvalidArgumentError(
                f"backend factory {spec.factory} (from {spec.distribution}) must be an async function"
            )
        try:
            return await result
        except ModuleNotFoundError as exc:
            # Factories may import their driver lazily; a missing one is an install problem too.
            raise _unavailable(spec, exc) from exc

    def sync_schemes(self) -> list[str]:
        """Installed state schemes whose backend serves :mod:`jobchain.sync` (has a ``sync_factory``)."""
        return sorted(
            scheme
            for (scheme, role), entry in self._entries.items()
            if role == "state" and entry.spec.sync_factory
        )

    def open_sync(self, url: BackendURL) -> object:
        """Call the ``sync_factory`` of ``url``'s state scheme (imported on first use).

        A state backend without one raises BackendUnavailableError naming the schemes that have one.
        """
        spec = self.lookup(url.scheme, "state")
        if not spec.sync_factory:
            served = ", ".join(f"{s}://" for s in self.sync_schemes()) or "(none installed)"
            raise BackendUnavailableError(
                f"the state backend {url.scheme}:// (from {spec.distribution}) has no synchronous adapter, "
                f"so jobchain.sync cannot use it; state backends that serve jobchain.sync: {served}. "
                "Use one of those, or the async client (jobchain.connect)"
            )
        factory = cast(SyncFactory, _load(spec, spec.sync_factory))
        try:
            result = factory(url)
        except ModuleNotFoundError as exc:
            raise _unavailable(spec, exc) from exc
        if inspect.isawaitable(result):
            if inspect.iscoroutine(result):
                result.close()
            raise InvalidArgumentError(
                f"backend sync_factory {spec.sync_factory} (from {spec.distribution}) must be a plain "
                "function returning the adapter, not an async one"
            )
        return result

    def scratch(self, url: BackendURL) -> AbstractContextManager[str]:
        """The ``scratch`` context of ``url``'s state scheme (imported on first use).

        A state backend without one raises BackendUnavailableError naming the schemes that have one.
        """
        spec = self.lookup(url.scheme, "state")
        if not spec.scratch:
            served = ", ".join(
                f"{scheme}://"
                for (scheme, role), entry in sorted(self._entries.items())
                if role == "state" and entry.spec.scratch
            )
            raise BackendUnavailableError(
                f"the state backend {url.scheme}:// (from {spec.distribution}) cannot make a scratch "
                f"database; state backends that can: {served or '(none installed)'}. Give each test "
                "its own database yourself, or use one of those"
            )
        factory = cast(Scratch, _load(spec, spec.scratch))
        try:
            return factory(url)
        except ModuleNotFoundError as exc:
            raise _unavailable(spec, exc) from exc

    def _unknown_message(self, scheme: str, role: Role) -> str:
        installed = ", ".join(f"{s}://" for s in self.schemes(role)) or "(none)"
        message = f"no installed backend serves {scheme}:// for {role}; installed {role} schemes: {installed}"
        if self.failures:
            broken = "; ".join(
                f"{f.name} from {f.distribution or 'unknown'}: {f.error}" for f in self.failures
            )
            message += f" (plugins that failed to import: {broken})"
        other_roles = [r for r in ROLES if r != role and (scheme, r) in self._entries]
        known = distribution_for(scheme, role)
        if known is not None and _installed_version(known) is not None:
            return (
                f"{message}. {known} is installed but does not serve {scheme}:// here; "
                f"reinstall it: pip install --force-reinstall {known}"
            )
        if known is not None:
            return f"{message}. Install it with: pip install {known}"
        other_known = {r: d for r, d in roles_known_for(scheme).items() if r != role}
        if other_roles or other_known:
            other = (other_roles or list(other_known))[0]
            return f"{message}. {scheme}:// is a {other} backend, not a {role} backend"
        return message


def _describe(entry: RegisteredBackend) -> str:
    return f"{entry.spec.distribution} ({entry.origin}, factory {entry.spec.factory})"


def _installed_version(distribution: str) -> str | None:
    try:
        return version(distribution)
    except PackageNotFoundError:
        return None


def _unavailable(spec: BackendSpec, exc: ModuleNotFoundError) -> BackendUnavailableError:
    return BackendUnavailableError(
        f"the {spec.role} backend {spec.scheme}:// needs {spec.distribution} and its driver, but "
        f"module {exc.name!r} is missing; install it with: pip install {spec.distribution}"
    )


_factories: dict[str, Callable[..., object]] = {}
_factories_lock = threading.Lock()


def load_factory(spec: BackendSpec) -> Factory:
    """Import ``spec.factory`` once; a missing module raises BackendUnavailableError naming the dist."""
    return cast(Factory, _load(spec, spec.factory))


def _load(spec: BackendSpec, target: str) -> Callable[..., object]:
    """Import ``target`` (``spec.factory``, ``spec.sync_factory`` or ``spec.scratch``) once."""
    with _factories_lock:
        cached = _factories.get(target)
    if cached is not None:
        return cached
    module_name, _, attr = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        # Either the backend's own module or its driver (psycopg, redis, …) is missing.
        raise _unavailable(spec, exc) from exc
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise BackendUnavailableError(
            f"the {spec.role} backend {spec.scheme}:// names factory {target}, but {module_name} "
            f"has no callable {attr!r}; upgrade or reinstall {spec.distribution}"
        )
    typed = cast(Callable[..., object], factory)
    with _factories_lock:
        _factories[target] = typed
    return typed


_registry: BackendRegistry | None = None
_registry_lock = threading.Lock()


def get_registry() -> BackendRegistry:
    """The process-wide registry, built from the plugin manager on first use."""
    global _registry
    with _registry_lock:
        if _registry is None:
            _registry = BackendRegistry.from_plugins(get_loaded_plugins())
        return _registry


def register(spec: BackendSpec) -> None:
    """Serve ``spec`` process-wide without packaging it (tests, embedders).

    A (scheme, role) already served by another spec raises BackendConflictError.
    """
    get_registry().register(spec)


def unregister(scheme: str, role: Role) -> None:
    """Stop serving (scheme, role) process-wide until the registry is rebuilt."""
    get_registry().unregister(scheme, role)


def reset_registry() -> None:
    """Drop the cached registry and imported factories; the next use rebuilds from the plugins."""
    global _registry
    with _registry_lock:
        _registry = None
    with _factories_lock:
        _factories.clear()


__all__ = [
    "BackendRegistry",
    "Factory",
    "RegisteredBackend",
    "SyncFactory",
    "get_registry",
    "load_factory",
    "register",
    "reset_registry",
    "unregister",
]
