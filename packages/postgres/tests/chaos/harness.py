"""Worker processes and the producer of the chaos cells.

Workers are real ``jobchain worker`` processes (``python -m jobchain.cli worker
chaos_app:processors``) with their output in a log file each; the producer is an asyncio task
of the test process that starts chains in batches at a steady rate through the jobchain
client, with explicit ids so the audit knows exactly which chains it believes committed.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import jobchain
from jobchain import ChainStart
from jobchain.entities import new_id

from . import chaos_app

APP_DIR: Final = Path(__file__).parent
log = logging.getLogger("jobchain.chaos")


@dataclass(frozen=True, slots=True)
class Knobs:
    """The timing knobs of a cell: short leases and polls so a cell takes tens of seconds."""

    lease: float = 5.0
    work: float = 0.3
    retry: float = 0.5
    poll_interval: float = 0.5
    concurrency: int = 4

    def env(self, exec_log: Path) -> dict[str, str]:
        return {
            "CHAOS_LEASE_SECONDS": str(self.lease),
            "CHAOS_WORK_SECONDS": str(self.work),
            "CHAOS_RETRY_SECONDS": str(self.retry),
            "CHAOS_EXEC_LOG": str(exec_log),
        }


class WorkerProcess:
    """One ``jobchain worker`` process; SIGKILL it, or stop it with SIGTERM."""

    def __init__(self, index: int, *, state: str, notify: str, knobs: Knobs, workdir: Path) -> None:
        self.index = index
        self.state = state
        self.notify = notify
        self.knobs = knobs
        self.workdir = workdir
        self.log_file = workdir / f"worker-{index}.log"
        self.process: subprocess.Popen[bytes] | None = None
        self.generation = 0

    @property
    def pid(self) -> int:
        assert self.process is not None, "not started"
        return self.process.pid

    def start(self) -> None:
        """Start the process (again) and return once it logs that it is processing."""
        assert self.process is None or self.process.poll() is not None, "already running"
        self.generation += 1
        env = {
            **os.environ,
            **self.knobs.env(self.workdir / "executions.log"),
            "PYTHONPATH": os.pathsep.join([str(APP_DIR), os.environ.get("PYTHONPATH", "")]),
        }
        command = [
            sys.executable,
            "-m",
            "jobchain.cli",
            "worker",
            "chaos_app:processors",
            "--state",
            self.state,
            "--notify",
            self.notify,
            "--concurrency",
            str(self.knobs.concurrency),
            "--poll-interval",
            str(self.knobs.poll_interval),
            "--name",
            f"chaos-{self.index}",
            "--loop",
            "asyncio",
        ]
        with self.log_file.open("ab") as out:
            out.write(f"--- start #{self.generation}\n".encode())
            out.flush()
            self.process = subprocess.Popen(
                command, cwd=self.workdir, env=env, stdout=out, stderr=subprocess.STDOUT
            )
        self._wait_ready()

    def _wait_ready(self, timeout: float = 60.0) -> None:
        marker = f"--- start #{self.generation}\n"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            text = self.log_file.read_text(errors="replace")
            tail = text[text.rfind(marker) :]
            if f"processing {chaos_app.TYPE_NAME}" in tail:
                return
            if self.process is not None and self.process.poll() is not None:
                break
            time.sleep(0.05)
        raise AssertionError(f"worker {self.index} did not start; its log:\n{self.tail()}")

    def kill(self) -> int:
        """SIGKILL: the process dies mid-job with no chance to release anything. Returns its pid."""
        assert self.process is not None
        pid = self.process.pid
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=30)
        return pid

    def stop(self) -> None:
        """SIGTERM and wait (a clean shutdown), SIGKILL if it does not end in 30 s."""
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=30)

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def tail(self, chars: int = 4000) -> str:
        return self.log_file.read_text(errors="replace")[-chars:] if self.log_file.exists() else ""


@dataclass
class Producer:
    """Starts ``rate`` chains per second, in batches every ``tick`` seconds, for ``duration``.

    A batch whose transaction fails is counted and dropped (its chains never existed unless
    the commit itself was cut: those ids go to ``uncertain`` and the audit accepts either).
    """

    state: str
    notify: str
    rate: float
    duration: float
    tick: float = 0.1
    input: Mapping[str, object] = field(default_factory=dict)
    committed: list[str] = field(default_factory=list)
    uncertain: list[str] = field(default_factory=list)
    failed_batches: int = 0
    started_at: float = 0.0
    ended_at: float = 0.0

    async def run(self) -> None:
        self.started_at = time.time()
        client = await self._connect()
        try:
            owed = 0.0
            deadline = time.monotonic() + self.duration
            next_tick = time.monotonic()
            while time.monotonic() < deadline:
                owed += self.rate * self.tick
                count = int(owed)
                owed -= count
                if count:
                    await self._batch(client, count)
                next_tick += self.tick
                await asyncio.sleep(max(0.0, next_tick - time.monotonic()))
        finally:
            self.ended_at = time.time()
            await client.close()

    async def _connect(self) -> jobchain.Client:
        return await jobchain.connect(self.state, notify=self.notify, job_types=chaos_app.job_types)

    async def _batch(self, client: jobchain.Client, count: int) -> None:
        ids = [new_id() for _ in range(count)]
        starts = [ChainStart(job_type=chaos_app.work, input=dict(self.input), id=job_id) for job_id in ids]
        try:
            async with asyncio.timeout(10):
                async with client.transaction() as tx:
                    await client.start_chains(tx, starts)
        except (jobchain.JobchainError, TimeoutError) as error:
            # The commit may or may not have happened: the audit accepts either for these ids.
            self.failed_batches += 1
            self.uncertain.extend(ids)
            log.debug("producer batch failed: %s", error)
            return
        self.committed.extend(ids)
