"""The chaos suite: marker, opt-in, the private PostgreSQL server, and the figures table.

Cells are marked ``chaos`` and run only with ``JOBCHAIN_CHAOS=1`` (``make chaos``); otherwise
they are skipped at collection, so ``make test`` pays nothing. ``JOBCHAIN_CHAOS_FULL=1``
runs the longer version. Every cell runs on a private cluster of this session (never the
shared server: cells kill, terminate and restart) in a database of its own. The figures of
every cell are written as JSON to ``JOBCHAIN_CHAOS_RESULTS`` (default: a file in the temporary
directory) and printed as a table at the end of the session.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from jobchain_postgres.testing import PrivateServer

from .audit import Figures
from .cells import MODE

ENABLED = os.environ.get("JOBCHAIN_CHAOS", "") not in ("", "0")
RESULTS_KEY = pytest.StashKey[list[dict[str, Any]]]()


def results_path() -> Path:
    explicit = os.environ.get("JOBCHAIN_CHAOS_RESULTS", "").strip()
    return Path(explicit) if explicit else Path(tempfile.gettempdir()) / "jobchain-chaos-results.json"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "chaos: fault-injection cells; run with JOBCHAIN_CHAOS=1 (make chaos)")
    config.stash[RESULTS_KEY] = []


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if ENABLED:
        return
    skip = pytest.mark.skip(reason="chaos cell: set JOBCHAIN_CHAOS=1 or run `make chaos`")
    for item in items:
        if item.get_closest_marker("chaos") is not None:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def chaos_server() -> Iterator[PrivateServer]:
    """A private PostgreSQL cluster for the whole session (each cell makes its own database)."""
    with PrivateServer(settings={"max_connections": "200", "log_min_messages": "fatal"}) as server:
        yield server


@pytest.fixture
def record_figures(request: pytest.FixtureRequest) -> Iterator[list[Figures]]:
    """Append a cell's figures here; they are saved even when its assertions fail."""
    figures: list[Figures] = []
    yield figures
    request.config.stash[RESULTS_KEY].extend(f.as_json() for f in figures)


def _fmt(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.1f}"
    return str(value)


COLUMNS = [
    ("cell", "cell"),
    ("faults", "faults"),
    ("started", "started"),
    ("lost", "lost"),
    ("double", "double_completions"),
    ("re-exec", "re_executions"),
    ("crash re-exec", "crash_re_executions"),
    ("unfinished at faults (sum)", "in_flight_at_crashes"),
    ("first completion after fault (max s)", "max_first_completion_after"),
    ("backlog drained after fault (max s)", "max_backlog_drained_after"),
    ("killed jobs rescued (max s)", "max_rescued_after"),
    ("slowest worker resumed (max s)", "max_slowest_worker_resumed_after"),
]


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    results = config.stash.get(RESULTS_KEY, [])
    if not results:
        return
    path = results_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"mode": MODE, "cells": results}, indent=2, default=str))
    rows = [[h for h, _ in COLUMNS]]
    for cell in results:
        row = [_fmt(len(cell["faults"]) if key == "faults" else cell.get(key)) for _, key in COLUMNS]
        rows.append(row)
    widths = [max(len(r[i]) for r in rows) for i in range(len(COLUMNS))]
    terminalreporter.write_sep("=", f"chaos figures ({MODE}) -> {path}")
    for row in rows:
        terminalreporter.write_line("  ".join(v.rjust(w) for v, w in zip(row, widths, strict=True)))
    for cell in results:
        if cell.get("extra"):
            # Id lists go to the JSON file; the table line shows how many.
            shown = {
                k: len(v) if isinstance(v, list) and v and isinstance(v[0], str) else v
                for k, v in cell["extra"].items()
                if k != "worker_logs"
            }
            terminalreporter.write_line(f"{cell['cell']}: {json.dumps(shown, default=str)}")
