"""The bench-only environment (bench/.venv): peers, psutil, matplotlib and jobchain's packages."""

from __future__ import annotations

import os
import subprocess
import sys
import venv
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
VENV = BENCH / ".venv"
PACKAGES = ["packages/core", "packages/sqlite", "packages/postgres", "packages/redis", "packages/nats"]


def ensure_venv(script: str) -> None:
    """Re-exec inside bench/.venv, creating or refreshing it when requirements changed."""
    python = VENV / "bin" / "python"
    stamp = VENV / ".installed"
    wanted = (BENCH / "requirements.txt").read_text() + "\n".join(PACKAGES)
    if not stamp.exists() or stamp.read_text() != wanted:
        print("bench: preparing bench/.venv (peers at their latest release)", flush=True)
        if not python.exists():
            venv.create(VENV, with_pip=True)
        pip = [str(python), "-m", "pip", "install", "--quiet"]
        subprocess.run([*pip, "--upgrade", "pip"], check=True)
        subprocess.run([*pip, "--upgrade", "-r", str(BENCH / "requirements.txt")], check=True)
        subprocess.run([*pip, *(x for p in PACKAGES for x in ("-e", str(ROOT / p)))], check=True)
        stamp.write_text(wanted)
    if Path(sys.prefix).resolve() != VENV.resolve():
        os.execv(str(python), [str(python), script, *sys.argv[1:]])
