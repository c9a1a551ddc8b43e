"""`make demo` runs `python -m jobchain.demo`: a real worker on the embedded SQLite default."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def test_demo_runs_the_chain_end_to_end_on_the_embedded_default(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBCHAIN_")}
    result = subprocess.run(
        [sys.executable, "-m", "jobchain.demo"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "SqliteStateAdapter" in out
    assert "charge_payment: attempt 1 failed" in out
    assert "charge_payment: attempt 2 charged" in out
    assert "pack: both blockers done" in out
    assert "chain completed: demo.place_order -> demo.pack -> demo.ship" in out
    assert (tmp_path / "jobchain.db").exists()
