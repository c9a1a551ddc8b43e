"""Fan-out from a real `jobchain worker` process, and the start-up line naming the served types.

The handler reaches the client only through its attempt (``attempt.start_chains``), the way
an application run by the CLI must: the worker process builds the client itself.
"""

from __future__ import annotations

import asyncio
import importlib
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

import jobchain

APP = textwrap.dedent(
    """
    from jobchain import ChainStart, JobTypes
    from jobchain.worker import Processors

    types = JobTypes()
    part = types.define("fan.part", input=int, output=int, entry=True)
    merge = types.define("fan.merge", input=None, output=int, blockers=[part])
    split = types.define("fan.split", input=int, output=int, entry=True, continues_with=[merge])
    unserved = types.define("fan.unserved", input=int, output=int, entry=True)
    processors = Processors()

    @processors.handler(split)
    async def fan_out(attempt):
        await attempt.prepare("atomic")  # the blockers commit together with the continuation
        started = await attempt.start_chains(
            [ChainStart(job_type=part, input=i) for i in range(attempt.input)]
        )
        return await attempt.continue_with(merge, None, blockers=[s.chain for s in started])

    @processors.handler(part)
    async def square(attempt):
        return await attempt.complete(attempt.input * attempt.input)

    @processors.handler(merge)
    async def add_up(attempt):
        return await attempt.complete(sum(chain.output for chain in await attempt.blockers()))
    """
)

SUBPROCESS_TIMEOUT = 60.0


@pytest.fixture
def app(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Path, ModuleType]]:
    (tmp_path / "fan_app.py").write_text(APP)
    monkeypatch.syspath_prepend(str(tmp_path))
    module = importlib.import_module("fan_app")
    yield tmp_path, module
    sys.modules.pop("fan_app", None)


def start_worker(app_dir: Path, state: str, *options: str) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBCHAIN_")}
    env["PYTHONPATH"] = str(app_dir)
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "jobchain.cli",
            "worker",
            "fan_app:processors",
            "--state",
            state,
            "--notify",
            "none",
            "--poll-interval",
            "0.05",
            "--concurrency",
            "4",
            *options,
        ],
        cwd=app_dir,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def wait_for_line(process: subprocess.Popen[str], needle: str) -> str:
    """Read the worker's output up to the first line containing ``needle``; return that line."""
    assert process.stdout is not None
    seen: list[str] = []
    deadline = time.monotonic() + SUBPROCESS_TIMEOUT
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line:
            break
        seen.append(line)
        if needle in line:
            return line
    raise AssertionError(f"{needle!r} not seen; output so far:\n{''.join(seen)}")


def stop_worker(process: subprocess.Popen[str]) -> None:
    try:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            assert process.wait(timeout=SUBPROCESS_TIMEOUT) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_a_cli_worker_handler_fans_out_and_continues_with_a_job_blocked_on_the_chains(
    app: tuple[Path, ModuleType],
) -> None:
    app_dir, fan_app = app
    state = f"sqlite:///{app_dir / 'jobs.db'}"

    async def start_split(n: int) -> str:
        async with await jobchain.connect(
            state, notify="none", job_types=fan_app.types, migrate=True
        ) as client:
            async with client.transaction() as tx:
                started = await client.start_chain(tx, fan_app.split, n)
        return started.id

    async def finish(chain_id: str) -> tuple[object, list[int]]:
        async with await jobchain.connect(state, notify="none", job_types=fan_app.types) as client:
            chain = await client.await_chain(chain_id, timeout=SUBPROCESS_TIMEOUT, poll_interval=0.05)
            parts = (await client.list_chains(type_names=[fan_app.part])).items
            blockers = await client.get_job_blockers(chain.last.id)
        assert {b.id for b in blockers} == {p.id for p in parts}  # the merge waited on every part
        return chain.output, sorted(p.output for p in parts)

    chain_id = asyncio.run(start_split(5))
    process = start_worker(app_dir, state)
    try:
        wait_for_line(process, "processing fan.")
        output, parts = asyncio.run(finish(chain_id))
    finally:
        stop_worker(process)
    assert output == 0 + 1 + 4 + 9 + 16
    assert parts == [0, 1, 4, 9, 16]


def test_the_start_up_line_names_only_the_types_this_worker_serves(app: tuple[Path, ModuleType]) -> None:
    app_dir, _ = app
    process = start_worker(app_dir, f"sqlite:///{app_dir / 'jobs.db'}", "--migrate")
    try:
        line = wait_for_line(process, "processing ")
    finally:
        stop_worker(process)
    assert "processing fan.merge, fan.part, fan.split on " in line
    assert "fan.unserved" not in line
