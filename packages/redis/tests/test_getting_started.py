"""Getting started §3 as a user runs it: `jobchain migrate`, `jobchain worker` and a starter script
in separate processes, state in a SQLite file, wake-ups over Redis.

The worker polls once an hour here, so the chain completes within the starter's timeout only
if the commit's wake-up reaches the worker through Redis (and the completion wakes the
starter's ``await_chain`` the same way).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
from dataclasses import replace
from pathlib import Path

from jobchain.url import BackendURL

PAGE = Path(__file__).resolve().parents[3] / "docs" / "getting-started.md"
FENCE = re.compile(r"^```python[^\n]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)
FILE_MARKER = re.compile(r"#\s*file:\s*([A-Za-z0-9_./-]+\.py)\s*$")
PROCESS_TIMEOUT = 120.0


def _page_files() -> dict[str, str]:
    """The page's ``# file: NAME.py`` blocks, by name."""
    files: dict[str, str] = {}
    for match in FENCE.finditer(PAGE.read_text(encoding="utf-8")):
        code = match.group(1)
        marker = FILE_MARKER.fullmatch(code.split("\n", 1)[0].strip())
        if marker is not None:
            files[marker.group(1)] = code
    return files


def _jobchain(*args: str) -> list[str]:
    return [sys.executable, "-m", "jobchain.cli", *args]


class _Lines:
    """Collects a process's output on a thread; ``wait_for`` blocks on a condition, not a clock."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.text = ""
        self._changed = threading.Condition()
        self._done = False
        threading.Thread(target=self._pump, args=(process,), daemon=True).start()

    def _pump(self, process: subprocess.Popen[str]) -> None:
        assert process.stdout is not None
        for line in process.stdout:
            with self._changed:
                self.text += line
                self._changed.notify_all()
        with self._changed:
            self._done = True
            self._changed.notify_all()

    def wait_for(self, needle: str) -> None:
        with self._changed:
            self._changed.wait_for(lambda: needle in self.text or self._done, PROCESS_TIMEOUT)
            assert needle in self.text, f"{needle!r} not logged; output so far:\n{self.text}"


def test_two_processes_wake_each_other_through_redis(
    tmp_path: Path, redis_url: str, unique_prefix: str
) -> None:
    files = _page_files()
    assert {"signup.py", "start.py"} <= set(files), "getting-started.md lost its signup.py/start.py blocks"
    for name, code in files.items():
        (tmp_path / name).write_text(code, encoding="utf-8")
    shared = BackendURL.parse(redis_url)
    notify = replace(shared, query={**shared.query, "prefix": unique_prefix}).render(hide_password=False)
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBCHAIN_")}
    env |= {
        "JOBCHAIN_STATE_URL": f"sqlite:///{tmp_path / 'jobchain.db'}",
        "JOBCHAIN_NOTIFY_URL": notify,
        "PYTHONPATH": str(tmp_path),
    }

    migrate = subprocess.run(
        _jobchain("migrate"), cwd=tmp_path, env=env, capture_output=True, text=True, timeout=PROCESS_TIMEOUT
    )
    assert migrate.returncode == 0, migrate.stdout + migrate.stderr

    worker = subprocess.Popen(
        _jobchain("worker", "signup:processors", "--concurrency", "10", "--poll-interval", "3600"),
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        log = _Lines(worker)
        log.wait_for("send_welcome")  # the start-up line: subscribed and serving
        start = subprocess.run(
            [sys.executable, "start.py"],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=PROCESS_TIMEOUT,
        )
        assert start.returncode == 0, start.stdout + start.stderr + "\nworker:\n" + log.text
        assert start.stdout.strip() == "completed send_welcome"
        log.wait_for("sending 'Welcome aboard' to eve@example.com")
    finally:
        worker.terminate()
        worker.wait(timeout=PROCESS_TIMEOUT)
