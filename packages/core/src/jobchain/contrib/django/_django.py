"""The parts of Django this integration uses, typed here once.

Django ships no type information (django-stubs is a separate, optional project), so under
``mypy --strict`` every name we use is declared below for the type checker, and imported from
Django at run time. Nothing else in ``jobchain.contrib.django`` imports Django directly.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable, Iterator
    from contextlib import AbstractContextManager
    from typing import Any

    class ImproperlyConfigured(Exception):  # noqa: N818 -- Django's name
        """django.core.exceptions.ImproperlyConfigured."""

    class CommandError(Exception):
        """django.core.management.base.CommandError."""

    class DatabaseWrapper:
        """A django.db backend connection wrapper (one per alias and thread)."""

        alias: str
        vendor: str
        settings_dict: dict[str, Any]
        connection: Any
        in_atomic_block: bool

        def ensure_connection(self) -> None: ...
        def close(self) -> None: ...

    class ConnectionHandler:
        """django.db.connections."""

        settings: dict[str, dict[str, Any]]

        def __getitem__(self, alias: str) -> DatabaseWrapper: ...
        def __iter__(self) -> Iterator[str]: ...
        def close_all(self) -> None: ...

    class LazySettings:
        """django.conf.settings."""

        DATABASES: dict[str, dict[str, Any]]

        def __getattr__(self, name: str) -> Any: ...

    class AppConfig:
        """django.apps.AppConfig."""

        name: str
        label: str
        verbose_name: str
        default_auto_field: str

        def ready(self) -> None: ...

    class BaseCommand:
        """django.core.management.base.BaseCommand."""

        help: str
        requires_system_checks: Any

        def __init__(self, *args: Any, **kwargs: Any) -> None: ...
        def add_arguments(self, parser: argparse.ArgumentParser) -> None: ...
        def handle(self, *args: Any, **options: Any) -> str | None: ...

        stdout: Any
        stderr: Any
        style: Any

    connections: ConnectionHandler
    settings: LazySettings
    setting_changed: Any

    def atomic(
        using: str | None = None, savepoint: bool = True, durable: bool = False
    ) -> AbstractContextManager[None]: ...
    def on_commit(func: Callable[[], object], using: str | None = None, robust: bool = False) -> None: ...
    def close_old_connections(**kwargs: Any) -> None: ...
else:
    from django.apps import AppConfig
    from django.conf import settings
    from django.core.exceptions import ImproperlyConfigured
    from django.core.management.base import BaseCommand, CommandError
    from django.core.signals import setting_changed
    from django.db import close_old_connections, connections
    from django.db.transaction import atomic, on_commit

__all__ = [
    "AppConfig",
    "BaseCommand",
    "CommandError",
    "ImproperlyConfigured",
    "atomic",
    "close_old_connections",
    "connections",
    "on_commit",
    "setting_changed",
    "settings",
]
