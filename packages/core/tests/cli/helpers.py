"""Running the ``jobchain`` command line in-process against a state URL."""

from __future__ import annotations

import json
from typing import Any

from click.testing import CliRunner, Result

from jobchain.cli import main


def cli(url: str, *args: str, input: str | None = None) -> Result:
    """``jobchain ARGS`` with ``JOBCHAIN_STATE_URL=url`` (no notify backend)."""
    runner = CliRunner()
    return runner.invoke(
        main,
        list(args),
        input=input,
        env={"JOBCHAIN_STATE_URL": url, "JOBCHAIN_NOTIFY_URL": "none", "COLUMNS": "200"},
        catch_exceptions=False,
    )


def ok_json(url: str, *args: str) -> Any:
    """The JSON document ``jobchain ARGS --json`` prints; the command must exit 0."""
    result = cli(url, *args, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def one_line_error(result: Result, exit_code: int = 1) -> str:
    """The single ``Error: ...`` line of a failed command (no traceback)."""
    assert result.exit_code == exit_code, result.output
    assert "Traceback" not in result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("Error: "), result.stderr
    return lines[0]


def status_of(url: str, job_id: str) -> str:
    """A job's status, read through ``jobchain jobs show --json``."""
    return str(ok_json(url, "jobs", "show", job_id)["job"]["status"])
