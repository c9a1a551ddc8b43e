"""`jobchain worker` as a real process: starts, logs, and stops cleanly on SIGTERM/SIGINT."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from jobchain.cli import main

APP = textwrap.dedent(
    """
    from dataclasses import dataclass
    from jobchain import JobTypes
    from jobchain.worker import Processors

    @dataclass
    class Ping:
        n: int

    types = JobTypes()
    ping = types.define("cli.ping", input=Ping, output=Ping, entry=True)
    processors = Processors()

    @processors.handler(ping)
    async def handle(attempt):
        return await attempt.complete(attempt.input)
    """
)


@pytest.fixture
def app_dir(tmp_path: Path) -> Path:
    (tmp_path / "cli_app.py").write_text(APP)
    return tmp_path


def _start(app_dir: Path) -> subprocess.Popen[str]:
    env = os.environ | {"PYTHONPATH": str(app_dir)}
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "jobchain.cli",
            "worker",
            "cli_app:processors",
            "--state",
            "memory://",
            "--poll-interval",
            "0.05",
        ],
        cwd=app_dir,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _wait_for(process: subprocess.Popen[str], needle: str, timeout: float = 20.0) -> str:
    assert process.stdout is not None
    seen = ""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line:
            break
        seen += line
        if needle in line:
            return seen
    raise AssertionError(f"{needle!r} not seen; output so far:\n{seen}")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_worker_command_stops_cleanly_on_signal(app_dir: Path, sig: signal.Signals) -> None:
    process = _start(app_dir)
    try:
        _wait_for(process, "processing cli.ping")
        process.send_signal(sig)
        rest = _wait_for(process, "stopping worker")
        assert process.wait(timeout=20) == 0, rest
    finally:
        if process.poll() is None:
            process.kill()


def test_worker_command_rejects_a_target_without_colon() -> None:
    result = CliRunner().invoke(main, ["worker", "nocolon"])
    assert result.exit_code != 0
    assert "MODULE:ATTRIBUTE" in result.output


def test_worker_command_rejects_a_target_that_is_not_processors(
    app_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(app_dir))
    result = CliRunner().invoke(main, ["worker", "cli_app:types"])
    assert result.exit_code != 0
    assert "Processors" in result.output
