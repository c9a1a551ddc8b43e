"""Helpers the Django test modules share (conftest.py is not importable: pytest owns it)."""

from __future__ import annotations

import os
from pathlib import Path


def tmp_dir() -> Path:
    """This test process's temp folder (set by conftest.py)."""
    return Path(os.environ["JOBCHAIN_DJANGO_TMP"])


def worker_env(database: str, **extra: str) -> dict[str, str]:
    """The environment of a ``python -m django …`` subprocess using alias ``database``."""
    return {
        **os.environ,
        "PYTHONPATH": os.environ["JOBCHAIN_DJANGO_PYTHONPATH"],
        "JOBCHAIN_DJANGO_DATABASE": database,
        **extra,
    }
