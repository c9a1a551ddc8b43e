"""Builds the process's pluggy PluginManager from the ``jobchain`` entry points.

Built-in backends (core's ``memory`` plugin) load through the same entry-point group as any
third party; core registers its plugin module directly only when the entry point is missing
(for example when the source tree is on ``sys.path`` without being installed).
"""

from __future__ import annotations

import importlib
import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from importlib.metadata import entry_points
from types import MappingProxyType
from typing import Final

import pluggy

from jobchain.contracts.observe import Observer
from jobchain.plugins import hookspecs
from jobchain.plugins.hookspecs import PROJECT_NAME

logger = logging.getLogger(__name__)

BUILTIN_PLUGINS: Final[Mapping[str, str]] = MappingProxyType({"memory": "jobchain.memory.plugin"})
"""Entry-point name → module of the plugins core itself ships (also declared in its pyproject)."""

CORE_DISTRIBUTION: Final = "jobchain"


@dataclass(frozen=True, slots=True)
class PluginSource:
    """Where a registered plugin came from."""

    name: str
    """The plugin's name in the manager (the entry-point name, qualified if it clashed)."""
    module: str
    distribution: str | None
    """The distribution that declared the entry point; None when registered directly."""
    version: str | None
    via_entry_point: bool


@dataclass(frozen=True, slots=True)
class PluginFailure:
    """An entry point whose module failed to import; its schemes are missing from the table."""

    name: str
    module: str
    distribution: str | None
    error: str


@dataclass(frozen=True, slots=True)
class UnmarkedHook:
    """A plugin function named like a hook but without ``@hookimpl``: pluggy never calls it."""

    plugin: str
    """The plugin's name in the manager."""
    module: str
    function: str
    distribution: str | None


@dataclass(frozen=True, slots=True)
class LoadedPlugins:
    """A ready PluginManager, the origin of every plugin in it, and the plugins that failed."""

    manager: pluggy.PluginManager
    sources: Mapping[str, PluginSource]
    failures: tuple[PluginFailure, ...] = ()
    unmarked_hooks: tuple[UnmarkedHook, ...] = ()
    """Hook-named functions the plugins define without ``@hookimpl`` (each logged as a warning)."""


HOOK_NAMES: Final[tuple[str, ...]] = tuple(
    name for name in dir(hookspecs) if hasattr(getattr(hookspecs, name), f"{PROJECT_NAME}_spec")
)
"""The names of the hookspecs (``jobchain_backends``, ``jobchain_observers``)."""


_lock = threading.Lock()
_loaded: LoadedPlugins | None = None


def load_plugins() -> LoadedPlugins:
    """Build a fresh PluginManager: hookspecs, entry points, built-in fallback, ``check_pending()``.

    Uncached; most callers want ``get_plugin_manager()``.
    """
    pm = pluggy.PluginManager(PROJECT_NAME)
    pm.add_hookspecs(hookspecs)
    sources: dict[str, PluginSource] = {}
    failures = _load_entry_points(pm, sources)
    for name, module_name in BUILTIN_PLUGINS.items():
        module = importlib.import_module(module_name)
        if pm.is_registered(module):
            continue
        logger.debug("jobchain: entry point %r missing; registering %s directly", name, module_name)
        registered = pm.register(module, name=_free_name(pm, name, CORE_DISTRIBUTION))
        if registered is not None:
            sources[registered] = PluginSource(registered, module_name, None, None, via_entry_point=False)
    pm.check_pending()
    unmarked = tuple(hook for name, source in sources.items() for hook in _unmarked_hooks(pm, name, source))
    return LoadedPlugins(pm, MappingProxyType(sources), tuple(failures), unmarked)


def _unmarked_hooks(pm: pluggy.PluginManager, name: str, source: PluginSource) -> list[UnmarkedHook]:
    """Warn about each function of the plugin named like a hook but lacking ``@hookimpl``.

    pluggy registers only marked functions and skips the rest without a word, so a plugin
    whose ``jobchain_observers`` forgot its decorator loaded cleanly and its hook never ran.
    """
    plugin = pm.get_plugin(name)
    found: list[UnmarkedHook] = []
    for hook_name in HOOK_NAMES:
        candidate = getattr(plugin, hook_name, None)
        if not callable(candidate) or candidate is getattr(hookspecs, hook_name):
            continue  # absent, or the spec itself imported into the module
        if pm.parse_hookimpl_opts(plugin, hook_name) is not None:
            continue  # marked: pluggy registered it
        hook = UnmarkedHook(name, source.module, hook_name, source.distribution)
        logger.warning(
            "jobchain: plugin %r (module %s, from %s) defines %s() without @jobchain.plugins.hookimpl, "
            "so its hook never runs; decorate it with @jobchain.plugins.hookimpl "
            "(from jobchain.plugins import hookimpl)",
            name,
            source.module,
            source.distribution or "no distribution",
            hook_name,
        )
        found.append(hook)
    return found


def _load_entry_points(pm: pluggy.PluginManager, sources: dict[str, PluginSource]) -> list[PluginFailure]:
    # Not pm.load_setuptools_entrypoints(): it silently skips a second distribution whose
    # entry point reuses a name ("redis" from two forks), so that distribution's schemes would
    # never reach the conflict check and the first one loaded would win unseen. It also lets
    # one broken distribution take every backend down; here it only loses its own schemes,
    # and UnknownSchemeError / `jobchain backends` report why.
    failures: list[PluginFailure] = []
    for ep in sorted(entry_points(group=PROJECT_NAME), key=lambda e: (e.name, e.value)):
        if pm.is_blocked(ep.name):
            continue
        dist = ep.dist.name if ep.dist is not None else None
        version = ep.dist.version if ep.dist is not None else None
        try:
            plugin = ep.load()
        except Exception as exc:
            logger.warning(
                "jobchain: plugin %r (%s) from %s failed to import: %r", ep.name, ep.value, dist, exc
            )
            failures.append(PluginFailure(ep.name, ep.value, dist, repr(exc)))
            continue
        if pm.is_registered(plugin):
            continue  # the same module declared twice (e.g. a stale egg-info beside a wheel)
        name = pm.register(plugin, name=_free_name(pm, ep.name, dist))
        if name is not None:
            sources[name] = PluginSource(name, ep.value, dist, version, via_entry_point=True)
    return failures


def _free_name(pm: pluggy.PluginManager, name: str, distribution: str | None) -> str:
    if pm.get_plugin(name) is None and not pm.is_blocked(name):
        return name
    return f"{name}@{distribution or 'unknown'}"


def get_loaded_plugins() -> LoadedPlugins:
    """The process-wide plugins, built on first use and cached until ``reset_plugin_manager()``."""
    global _loaded
    with _lock:
        if _loaded is None:
            _loaded = load_plugins()
        return _loaded


def get_plugin_manager() -> pluggy.PluginManager:
    """The process-wide PluginManager (built once)."""
    return get_loaded_plugins().manager


def reset_plugin_manager() -> None:
    """Forget the cached manager so the next call rebuilds it (tests, after installs)."""
    global _loaded
    with _lock:
        _loaded = None


def collect_observers(pm: pluggy.PluginManager | None = None) -> list[Observer]:
    """Every observer returned by the plugins' ``jobchain_observers`` hooks, in call order."""
    pm = pm or get_plugin_manager()
    return [observer for result in pm.hook.jobchain_observers() for observer in result]


__all__ = [
    "BUILTIN_PLUGINS",
    "LoadedPlugins",
    "PluginFailure",
    "PluginSource",
    "UnmarkedHook",
    "collect_observers",
    "get_loaded_plugins",
    "get_plugin_manager",
    "load_plugins",
    "reset_plugin_manager",
]
