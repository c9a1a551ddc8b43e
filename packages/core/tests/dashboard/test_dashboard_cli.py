"""``jobchain dashboard``: the refusals (one line, exit 1) and a real run on loopback, as a
subprocess serving HTTP, behind the token it makes up and prints."""

from __future__ import annotations

import os
import queue
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from click.testing import CliRunner

from jobchain.cli import main

BOUND = 60.0
"""Upper bound of every wait on the subprocess; a passing run needs a few seconds."""


def _env_without_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("JOBCHAIN_DASHBOARD_TOKEN", "JOBCHAIN_DASHBOARD_USER", "JOBCHAIN_DASHBOARD_PASSWORD"):
        monkeypatch.delenv(name, raising=False)


def test_the_cli_refuses_0_0_0_0_without_credentials_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    _env_without_credentials(monkeypatch)
    result = CliRunner().invoke(main, ["dashboard", "--state", "memory://", "--host", "0.0.0.0"])
    assert result.exit_code == 1
    lines = result.output.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("Error: refusing to serve the dashboard on 0.0.0.0 without credentials")
    assert "JOBCHAIN_DASHBOARD_TOKEN" in lines[0]
    assert isinstance(result.exception, SystemExit)


def test_the_cli_reports_a_bad_state_url_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JOBCHAIN_DASHBOARD_TOKEN", "t0ken-t0ken-t0ken")
    result = CliRunner().invoke(main, ["dashboard", "--state", "nosuch://x:pw-secret@h/db"])
    assert result.exit_code == 1
    lines = result.output.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("Error: ")
    assert "pw-secret" not in result.output


def test_the_cli_refuses_an_unmigrated_database_in_one_line(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("JOBCHAIN_DASHBOARD_TOKEN", "t0ken-t0ken-t0ken")
    result = CliRunner().invoke(main, ["dashboard", "--state", f"sqlite:///{tmp_path / 'fresh.db'}"])
    assert result.exit_code == 1
    [line] = result.output.strip().splitlines()
    assert "jobchain migrate" in line


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _get(url: str, token: str | None) -> tuple[int, str]:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        with exc:  # closes the connection: uvicorn's graceful shutdown waits for open ones
            return exc.code, exc.read().decode()


def test_the_cli_serves_on_loopback_behind_a_token_it_prints(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    assert CliRunner().invoke(main, ["migrate", "--state", url]).exit_code == 0
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBCHAIN_DASHBOARD_")}
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "jobchain.cli",
            "dashboard",
            "--state",
            url,
            "--port",
            str(port),
            "--read-only",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    lines: queue.Queue[str] = queue.Queue()
    assert process.stderr is not None
    reader = threading.Thread(target=lambda: [lines.put(line) for line in process.stderr], daemon=True)  # type: ignore[union-attr]
    reader.start()
    try:
        token = None
        deadline = time.monotonic() + BOUND
        while token is None:
            line = lines.get(timeout=max(0.1, deadline - time.monotonic()))
            found = re.search(r"this run's token is (\S+)", line)
            token = found.group(1) if found else None
        base = f"http://127.0.0.1:{port}"
        while True:  # serving starts just after the token is printed
            try:
                status, _ = _get(f"{base}/login", None)
                break
            except (ConnectionError, urllib.error.URLError):
                assert time.monotonic() < deadline, "the dashboard did not start serving"
                time.sleep(0.05)
        assert status == 200
        assert _get(f"{base}/", None)[0] == 401
        assert _get(f"{base}/", "not-the-token")[0] == 401
        status, page = _get(f"{base}/", token)
        assert status == 200
        assert "read-only" in page
        assert f"sqlite:///{tmp_path / 'jobs.db'}" in page
        assert token not in page
    finally:
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=BOUND) == 0
