"""Worker processes and the producer of the chaos cells.

Workers are real ``jobchain worker`` processes (``python -m jobchain.cli worker
chaos_app:processors``) with their output in a log file each; the producer is an asyncio task
of the test process that starts chains in batches at a steady rate through the jobchain
client, with explicit ids so the audit knows exactly which chains it believes committed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import jobchain
from jobchain import ChainStart, JobType
from jobchain.entities import new_id

from . import chaos_app

APP_DIR: Final = Path(__file__).parent
log = logging.getLogger("jobchain.chaos")


@dataclass(frozen=True, slots=True)
class Knobs:
    """The timing settings of a cell; ``None`` leaves the library's default in place.

    The compact defaults (3 s lease, 0.5 s idle poll, 0.3 s of work per job inside the attempt
    transaction, a 0.5 s first retry, concurrency 4) make a cell take seconds, not minutes.
    """

    lease: float | None = 3.0
    """Lease of ``chaos.work`` (library default: 60 s)."""
    long_lease: float | None = None
    """Lease of ``chaos.long`` (library default: 60 s)."""
    work: float = 0.3
    retry: float | None = 0.5
    poll_interval: float | None = 0.5
    """The worker's idle poll (CLI default: 60 s)."""
    concurrency: int | None = 4
    """Slots per worker (CLI default: 10)."""
    heartbeat: float | None = None
    """Heartbeat interval (library default: 2 s): ``--heartbeat-interval``."""
    types: tuple[str, ...] = (chaos_app.TYPE_NAME,)
    """The job types the producer starts, in turn."""
    limit: int = 2
    """``max_running`` of ``chaos.limited``."""
    steps: int = 10
    step: float = 0.1
    """``chaos.limited``'s handler works in ``steps`` steps of ``step`` seconds."""

    def env(self, exec_log: Path) -> dict[str, str]:
        """The chaos app's environment (an empty value means the library default)."""
        return {
            "CHAOS_LEASE_SECONDS": _opt(self.lease),
            "CHAOS_LONG_LEASE_SECONDS": _opt(self.long_lease),
            "CHAOS_WORK_SECONDS": str(self.work),
            "CHAOS_RETRY_SECONDS": _opt(self.retry),
            "CHAOS_EXEC_LOG": str(exec_log),
            "CHAOS_STEP_LOG": str(exec_log.with_name("steps.log")),
            "CHAOS_LIMIT": str(self.limit),
            "CHAOS_STEPS": str(self.steps),
            "CHAOS_STEP_SECONDS": str(self.step),
        }

    def cli_options(self) -> list[str]:
        """``jobchain worker`` options for the knobs that are set."""
        options: list[str] = []
        if self.concurrency is not None:
            options += ["--concurrency", str(self.concurrency)]
        if self.poll_interval is not None:
            options += ["--poll-interval", str(self.poll_interval)]
        if self.heartbeat is not None:
            options += ["--heartbeat-interval", str(self.heartbeat)]
        # A cell being looked into can ask for DEBUG lines: JOBCHAIN_CHAOS_LOG_LEVEL=DEBUG.
        options += ["--log-level", os.environ.get("JOBCHAIN_CHAOS_LOG_LEVEL", "INFO")]
        return options


def _opt(value: float | None) -> str:
    return "" if value is None else str(value)


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

    def launch(self) -> None:
        """Start the process (again); :meth:`wait_ready` waits until it processes."""
        assert self.process is None or self.process.poll() is not None, "already running"
        self.generation += 1
        env = {
            **os.environ,
            **self.knobs.env(self.workdir / "executions.log"),
            "PYTHONPATH": os.pathsep.join([str(APP_DIR), os.environ.get("PYTHONPATH", "")]),
        }
        command = [
            *(sys.executable, "-m", "jobchain.cli", "worker", "chaos_app:processors"),
            *("--state", self.state, "--notify", self.notify, "--name", f"chaos-{self.index}"),
            *("--loop", "asyncio"),
            *self.knobs.cli_options(),
        ]
        with self.log_file.open("ab") as out:
            out.write(f"--- start #{self.generation}\n".encode())
            out.flush()
            self.process = subprocess.Popen(
                command, cwd=self.workdir, env=env, stdout=out, stderr=subprocess.STDOUT
            )

    def wait_ready(self, timeout: float = 60.0) -> None:
        """Return once the current process logs that it is processing its job types."""
        marker = f"--- start #{self.generation}\n"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            text = self.log_file.read_text(errors="replace")
            if " processing " in text[text.rfind(marker) :]:
                return
            if self.process is not None and self.process.poll() is not None:
                break
            time.sleep(0.05)
        raise AssertionError(f"worker {self.index} did not start; its log:\n{self.tail()}")

    def start(self) -> None:
        """Launch and wait until ready."""
        self.launch()
        self.wait_ready()

    def kill(self) -> int:
        """SIGKILL: the process dies mid-job with no chance to release anything. Returns its pid."""
        assert self.process is not None
        pid = self.process.pid
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=30)
        return pid

    def pause(self) -> None:
        """SIGSTOP: the process freezes where it is (a GC pause, a VM stall), sockets open."""
        assert self.process is not None
        self.process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        """SIGCONT: the frozen process runs on from where it was."""
        assert self.process is not None
        self.process.send_signal(signal.SIGCONT)

    def stop(self) -> None:
        """SIGTERM and wait (a clean shutdown), SIGKILL if it does not end in 30 s."""
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGCONT)  # a cell that failed mid-stall left it frozen
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
    """Starts ``rate`` chains per second, in batches every ``tick`` seconds, until stopped.

    The job types of ``types`` take turns. A batch whose transaction fails is counted and
    dropped (its chains never existed unless the commit itself was cut: those ids go to
    ``uncertain`` and the audit accepts either).
    """

    state: str
    notify: str
    rate: float
    types: Sequence[str] = (chaos_app.TYPE_NAME,)
    tick: float = 0.1
    input: Mapping[str, object] = field(default_factory=dict)
    committed: list[str] = field(default_factory=list)
    uncertain: list[str] = field(default_factory=list)
    failed_batches: int = 0
    started_at: float = 0.0
    ended_at: float = 0.0
    stop: asyncio.Event = field(default_factory=asyncio.Event)

    async def run(self) -> None:
        self.started_at = time.time()
        client = await self._connect()
        job_types: list[JobType[Any, Any]] = [client.job_types.get(name) for name in self.types]
        turn = 0
        try:
            owed = 0.0
            next_tick = time.monotonic()
            while not self.stop.is_set():
                owed += self.rate * self.tick
                count = int(owed)
                owed -= count
                if count:
                    await self._batch(client, [job_types[(turn + i) % len(job_types)] for i in range(count)])
                    turn += count
                next_tick += self.tick
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.stop.wait(), max(0.0, next_tick - time.monotonic()))
        finally:
            self.ended_at = time.time()
            await client.close()

    async def _connect(self) -> jobchain.Client:
        return await jobchain.connect(self.state, notify=self.notify, job_types=chaos_app.job_types)

    async def _batch(self, client: jobchain.Client, types: list[JobType[Any, Any]]) -> None:
        ids = [new_id() for _ in types]
        starts = [
            ChainStart(job_type=job_type, input=dict(self.input), id=job_id)
            for job_type, job_id in zip(types, ids, strict=True)
        ]
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
