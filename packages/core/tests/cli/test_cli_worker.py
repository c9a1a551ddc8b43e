"""`jobchain worker` as a real process: starts, logs, and stops cleanly on SIGTERM/SIGINT."""

from __future__ import annotations

import asyncio
import importlib
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

import jobchain
from jobchain.cli import main
from jobchain.cli.worker import run_on_loop
from jobchain.errors import InvalidArgumentError

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


def _start(app_dir: Path, *options: str, state: str = "memory://") -> subprocess.Popen[str]:
    env = os.environ | {"PYTHONPATH": str(app_dir)}
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "jobchain.cli",
            "worker",
            "cli_app:processors",
            "--state",
            state,
            "--poll-interval",
            "0.05",
            *options,
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


@pytest.mark.parametrize("loop", ["uvloop", "asyncio"])
def test_worker_command_processes_jobs_on_the_chosen_loop(
    app_dir: Path, loop: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(app_dir))
    app = importlib.import_module("cli_app")
    state = f"sqlite:///{app_dir / 'jobs.db'}"

    async def start_chains() -> list[str]:
        async with await jobchain.connect(state, notify="none", job_types=app.types, migrate=True) as client:
            async with client.transaction() as tx:
                started = [await client.start_chain(tx, app.ping, app.Ping(n=n)) for n in range(5)]
        return [s.chain.id for s in started]

    async def outputs(chain_ids: list[str]) -> list[object]:
        async with await jobchain.connect(state, notify="none", job_types=app.types) as client:
            chains = [await client.await_chain(c, timeout=20, poll_interval=0.05) for c in chain_ids]
        return [chain.last.output for chain in chains]

    chain_ids = asyncio.run(start_chains())
    process = _start(app_dir, "--loop", loop, "--prefetch", "3", "--concurrency", "2", state=state)
    try:
        _wait_for(process, f"processing cli.ping on {loop}")
        assert asyncio.run(outputs(chain_ids)) == [{"n": n} for n in range(5)]
        process.send_signal(signal.SIGTERM)
        rest = _wait_for(process, "stopping worker")
        assert process.wait(timeout=20) == 0, rest
    finally:
        if process.poll() is None:
            process.kill()


def test_worker_command_rejects_an_unknown_loop() -> None:
    result = CliRunner().invoke(main, ["worker", "cli_app:processors", "--loop", "trio"])
    assert result.exit_code != 0
    assert "trio" in result.output


def test_without_uvloop_auto_falls_back_and_uvloop_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "uvloop", None)  # makes `import uvloop` fail
    ran: list[str] = []

    async def main() -> None:
        ran.append(type(asyncio.get_running_loop()).__module__)

    assert run_on_loop(main, "auto") == "asyncio"
    assert [module.partition(".")[0] for module in ran] == ["asyncio"]
    with pytest.raises(InvalidArgumentError, match=r"pip install 'jobchain\[uvloop\]'"):
        run_on_loop(main, "uvloop")
    assert len(ran) == 1


def test_worker_command_registers_with_the_heartbeat_settings_it_is_given(
    app_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(app_dir))
    app = importlib.import_module("cli_app")
    state = f"sqlite:///{app_dir / 'jobs.db'}"

    async def registered() -> list[jobchain.WorkerInfo]:
        async with await jobchain.connect(state, notify="none", job_types=app.types, migrate=True) as client:
            return await client.list_workers()

    asyncio.run(registered())  # migrated before the worker starts
    process = _start(app_dir, "--heartbeat-interval", "0.5", "--missed-heartbeats", "4", state=state)
    try:
        _wait_for(process, "processing cli.ping")
        workers = asyncio.run(registered())
        for _ in range(400):  # the first heartbeat runs beside the start-up line
            if workers:
                break
            time.sleep(0.05)
            workers = asyncio.run(registered())
        [worker] = workers
        # alive_for = heartbeat_interval * missed_heartbeats = 2 s after the last heartbeat.
        assert (worker.alive_until - worker.last_seen_at).total_seconds() == pytest.approx(2.0)
        assert worker.state is jobchain.WorkerState.RUNNING
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=20)
    [stopped] = asyncio.run(registered())
    assert stopped.state is jobchain.WorkerState.STOPPED


def test_worker_command_refuses_fewer_than_two_missed_heartbeats() -> None:
    result = CliRunner().invoke(main, ["worker", "cli_app:processors", "--missed-heartbeats", "1"])
    assert result.exit_code == 2
    assert "--missed-heartbeats" in result.output
