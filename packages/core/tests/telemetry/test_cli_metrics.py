"""`jobchain worker --metrics-port`: the endpoint of a real worker process, and a port in use."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import sys
from pathlib import Path

import httpx
from click.testing import CliRunner

from jobchain.cli.worker import worker_command

from .support import wait_until


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_a_port_in_use_exits_1_with_one_line_naming_it() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = CliRunner().invoke(
            worker_command,
            ["jobchain.demo:processors", "--state", "memory://", "--metrics-port", str(port)],
            catch_exceptions=False,
        )
    assert result.exit_code == 1
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert lines[-1] == (
        f"Error: metrics port {port} is already in use (127.0.0.1:{port}); pass another port "
        "(--metrics-port) or stop what listens there"
    )
    assert "Traceback" not in result.output


async def test_a_worker_process_serves_its_metrics(tmp_path: Path) -> None:
    port = _free_port()
    env = {**os.environ, "JOBCHAIN_STATE_URL": "memory://"}
    process = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "jobchain.cli", "worker", "jobchain.demo:processors"),
        *("--metrics-port", str(port), "--metrics-host", "127.0.0.1", "--name", "metrics-test"),
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        cwd=tmp_path,
    )
    try:

        async def scrape() -> str | None:
            try:
                async with httpx.AsyncClient() as http:
                    response = await http.get(f"http://127.0.0.1:{port}/metrics")
            except httpx.TransportError:
                return None
            # The queue gauges appear once the worker registered and sampled (it is alone).
            return response.text if "jobchain_queue_jobs{" in response.text else None

        # A fresh interpreter imports the CLI and connects first: allow a loaded machine time.
        text = await wait_until(scrape, "the worker's metrics endpoint", bound=60)
    finally:
        process.send_signal(signal.SIGTERM)
        async with asyncio.timeout(30):
            output = await process.communicate()
    assert "# TYPE jobchain_jobs_started_total counter" in text
    assert "# TYPE jobchain_attempt_duration_seconds histogram" in text
    assert 'jobchain_queue_jobs{job_type="demo.place_order",status="pending"} 0.0' in text
    assert process.returncode == 0, output[0]
    assert f"serving Prometheus metrics on 127.0.0.1:{port}/metrics" in output[0].decode()
