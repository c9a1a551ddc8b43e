"""The chaos suite: marker, modes, the private PostgreSQL server, and the figures table.

Cells are marked ``chaos`` and run in every test run (``make test``) in their compact form,
serially, on one xdist worker (``xdist_group("chaos")``). ``JOBCHAIN_CHAOS=0`` skips them;
cells marked ``chaos_extra`` (the ones that did not fit the compact budget) run only with
``JOBCHAIN_CHAOS=1``; ``JOBCHAIN_CHAOS_FULL=1`` runs the long version (``make chaos`` sets
both). Every cell runs on a private cluster of this session (never the shared server: cells
kill, terminate and restart) in a database of its own. A missing ``initdb``/``pg_ctl`` or
broker binary skips, except under ``CI=true``, where it fails.

The figures of every cell are written as JSON to ``JOBCHAIN_CHAOS_RESULTS`` (default: a file
in the temporary directory) by the process that ran the cells, and printed as a table at the
end of a session without xdist (``make chaos``).
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from jobchain_postgres.testing import PrivateServer, PrivateServerError

from .audit import AUDIT_TABLE, Figures
from .cells import MODE, TEMPLATE
from .faults import conninfo, missing

SETTING = os.environ.get("JOBCHAIN_CHAOS", "").strip()
DISABLED = SETTING == "0"
EXTRA = SETTING not in ("", "0")


def results_path() -> Path:
    explicit = os.environ.get("JOBCHAIN_CHAOS_RESULTS", "").strip()
    return Path(explicit) if explicit else Path(tempfile.gettempdir()) / "jobchain-chaos-results.json"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "chaos: fault-injection cells (JOBCHAIN_CHAOS=0 skips them)")
    config.addinivalue_line(
        "markers", "chaos_extra: chaos cells beyond the compact budget of make test (JOBCHAIN_CHAOS=1)"
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if DISABLED and item.get_closest_marker("chaos") is not None:
            item.add_marker(pytest.mark.skip(reason="chaos cells disabled by JOBCHAIN_CHAOS=0"))
        elif not EXTRA and item.get_closest_marker("chaos_extra") is not None:
            item.add_marker(pytest.mark.skip(reason="beyond the compact chaos budget: run `make chaos`"))


@pytest.fixture(scope="session")
def chaos_server() -> Iterator[PrivateServer]:
    """A private PostgreSQL cluster for the whole session, with a migrated template database
    that every cell copies."""
    try:
        server = PrivateServer(settings={"max_connections": "200", "log_min_messages": "fatal"})
    except PrivateServerError as error:
        missing(str(error))
    with server:
        with psycopg.connect(conninfo(server.port, "postgres"), autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(TEMPLATE)))
        url = f"postgresql://postgres@127.0.0.1:{server.port}/{TEMPLATE}"
        done = subprocess.run(
            [sys.executable, "-m", "jobchain.cli", "migrate", "--state", url],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, f"jobchain migrate failed: {done.stdout}{done.stderr}"
        with psycopg.connect(conninfo(server.port, TEMPLATE), autocommit=True) as conn:
            conn.execute(AUDIT_TABLE)
            row = conn.execute("SELECT version()").fetchone()
            META["postgresql"] = str(row[0]) if row else "?"
        yield server


RESULTS: dict[str, dict[str, Any]] = {}
"""Figures per cell, in this process (an xdist worker runs the whole chaos group)."""
OUTCOMES: dict[str, str] = {}
META: dict[str, Any] = {}
"""The run: when, where, on which commit, how busy the machine was."""


def pytest_sessionstart(session: pytest.Session) -> None:
    command = ["git", "rev-parse", "--short", "HEAD"]
    commit = subprocess.run(command, capture_output=True, text=True, check=False)
    META.update(
        {
            "date": time.strftime("%Y-%m-%d", time.gmtime()),
            "began": time.time(),
            "commit": commit.stdout.strip() or "?",
            "machine": f"{os.cpu_count()} cores, {platform.platform()}",
            "python": platform.python_version(),
            "load_before": [round(v, 2) for v in os.getloadavg()],
        }
    )


@pytest.fixture
def record_figures(request: pytest.FixtureRequest) -> Iterator[list[Figures]]:
    """Append a cell's figures here; they are reported even when its assertions fail."""
    figures: list[Figures] = []
    yield figures
    for entry in figures:
        data = json.loads(json.dumps(entry.as_json(), default=str))
        data["nodeid"] = request.node.nodeid.split("@")[0]
        RESULTS[data["cell"]] = data


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Remember each cell's outcome (the call's, or the setup's if that failed)."""
    if report.when == "call" or (report.when == "setup" and report.outcome != "passed"):
        OUTCOMES[report.nodeid.split("@")[0]] = _outcome(report)


def _outcome(report: pytest.TestReport) -> str:
    if hasattr(report, "wasxfail"):
        return "xfailed" if report.skipped else "xpassed"
    return report.outcome


def _results() -> list[dict[str, Any]]:
    for data in RESULTS.values():
        data["outcome"] = OUTCOMES.get(data["nodeid"], "unknown")
    return list(RESULTS.values())


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Write the figures (here, not in the terminal summary: under xdist only a worker has them)."""
    if RESULTS:
        META["load_after"] = [round(v, 2) for v in os.getloadavg()]
        META["wall_seconds"] = round(time.time() - META["began"], 1)
        path = results_path()
        path.parent.mkdir(parents=True, exist_ok=True)
        data = {"mode": MODE, "meta": META, "cells": _results()}
        path.write_text(json.dumps(data, indent=2, default=str))


def _fmt(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.1f}"
    return str(value)


COLUMNS = [
    ("cell", "cell"),
    ("outcome", "outcome"),
    ("faults", "faults"),
    ("started", "started"),
    ("lost", "lost"),
    ("double", "double_completions"),
    ("re-exec", "re_executions"),
    ("crash re-exec", "crash_re_executions"),
    ("unfinished at faults", "in_flight_at_crashes"),
    ("first completion (max s)", "max_first_completion_after"),
    ("backlog drained (max s)", "max_backlog_drained_after"),
    ("killed jobs run again (max s)", "max_rescue_started_after"),
    ("slowest worker resumed (max s)", "max_slowest_worker_resumed_after"),
    ("stale starts", "extra.stale_starts"),
    ("limited at once", "extra.limited_at_once_max"),
    ("presumed dead", "extra.presumed_dead_warnings"),
    ("wall s", "wall_seconds"),
]
"""The terminal table: header, and the key in a cell's figures (``extra.`` for its extras)."""


def _cell_value(cell: dict[str, Any], key: str) -> object:
    if key == "faults":
        return len(cell["faults"])
    if key.startswith("extra."):
        return cell.get("extra", {}).get(key.removeprefix("extra."))
    return cell.get(key)


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    results = _results()
    if not results:
        return
    rows = [[h for h, _ in COLUMNS]]
    for cell in results:
        rows.append([_fmt(_cell_value(cell, key)) for _, key in COLUMNS])
    widths = [max(len(r[i]) for r in rows) for i in range(len(COLUMNS))]
    terminalreporter.write_sep("=", f"chaos figures ({MODE}) -> {results_path()}")
    for row in rows:
        terminalreporter.write_line("  ".join(v.rjust(w) for v, w in zip(row, widths, strict=True)))
