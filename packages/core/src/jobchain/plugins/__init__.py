"""Backend plugins: pluggy hookspecs, the entry-point loader and the (scheme, role) registry.

A backend distribution declares ``[project.entry-points.jobchain] name = "pkg.plugin"``; its
``plugin.py`` implements ``jobchain_backends()`` with ``@hookimpl``. Tests and embedders may
call ``register(BackendSpec(...))`` instead.
"""

from jobchain.plugins.hookspecs import PROJECT_NAME, BackendSpec, Role, hookimpl, hookspec
from jobchain.plugins.manager import collect_observers, get_plugin_manager, reset_plugin_manager
from jobchain.plugins.registry import BackendRegistry, get_registry, register, reset_registry, unregister


def reset() -> None:
    """Forget the cached plugin manager, registry and factories (tests; after installing a backend)."""
    reset_registry()
    reset_plugin_manager()


__all__ = [
    "PROJECT_NAME",
    "BackendRegistry",
    "BackendSpec",
    "Role",
    "collect_observers",
    "get_plugin_manager",
    "get_registry",
    "hookimpl",
    "hookspec",
    "register",
    "reset",
    "unregister",
]
