"""Django integration: start chains in ``transaction.atomic()``, run the worker with manage.py.

``INSTALLED_APPS += ["jobchain.contrib.django"]`` and a ``JOBCHAIN`` setting (see
:mod:`jobchain.contrib.django.conf`); then :func:`start_chain` inside your view's atomic
block, ``manage.py jobchain_migrate`` once per deploy, ``manage.py jobchain_worker`` to run
the jobs. Guide: docs/guides/django.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__all__ = ["client", "close_clients", "start_chain", "start_chains", "transaction"]

if TYPE_CHECKING:
    from jobchain.contrib.django.chains import client, close_clients, start_chain, start_chains, transaction


def __getattr__(name: str) -> Any:
    # Lazy: Django imports this package (INSTALLED_APPS) before its settings and apps are ready.
    if name in __all__:
        from jobchain.contrib.django import chains

        return getattr(chains, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
