"""Fresh virtualenvs for the install tests (test_install.py, test_dist.py): jobchain installed
the way a user installs it, with nothing from the workspace's .venv or editable checkout.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[4]
TIMEOUT = 600.0
"""Seconds each subprocess may take. pip into a fresh venv and a first run are CPU-bound, and on
a starved machine (8 CPU burners on 2 cores) past pytest-timeout's usual 120 s, so this bound
is the test's (its mark adds a minute)."""


def clean_env() -> dict[str, str]:
    """The environment without jobchain's URLs, Python's search paths or the active venv."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("JOBCHAIN_", "PYTHON", "VIRTUAL_ENV"))}


def run(args: list[str], cwd: Path, env: dict[str, str]) -> str:
    """``args``' standard output; it must exit 0."""
    done = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=TIMEOUT)
    assert done.returncode == 0, f"{args} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def fresh_venv(path: Path, env: dict[str, str]) -> Path:
    """A new virtualenv at ``path`` (no system site-packages); its python."""
    run([sys.executable, "-m", "venv", str(path)], path.parent, env)
    return path / "bin" / "python"


def pip_install(python: Path, targets: list[str], cwd: Path, env: dict[str, str]) -> None:
    """``pip install targets`` into ``python``'s venv, from the configured index."""
    run([str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", *targets], cwd, env)
