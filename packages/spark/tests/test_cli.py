"""The ``jobchain-spark`` command line: one-line errors, ``--debug`` traces, this Python for workers.

The plain commands run in a child process, as a user runs them: with PYSPARK_PYTHON unset and
the virtualenv's ``bin`` off the PATH, so the Spark workers find jobchain-spark only if the
command line points them at its own interpreter, and all of the process's stderr is seen.
The ``--debug`` runs are in this process (``CliRunner``): what they assert is that the error
leaves the command uncaught with its whole trace, which Python then prints; a child process
would only add a second JVM start for the Spark case.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import sparkkit
from click.testing import CliRunner, Result

from jobchain.connect_backends import open_state
from jobchain_spark.cli import main
from jobchain_spark.cli_errors import one_line
from jobchain_spark.errors import UnknownTableError
from jobchain_spark.session import PYTHON_VARIABLES, use_this_python

TRACE_MARKS = ("Traceback (most recent call last)", "\tat org.apache.", "Py4JJavaError")


def _run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in PYTHON_VARIABLES}
    venv_bin = str(Path(sys.executable).parent)
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if p != venv_bin)
    # The child's JVM runs with the tests' JVM options (C1 only, serial GC: a faster start, the
    # same Spark); the command adds its quiet log4j configuration to these, as to a user's.
    env["SPARK_SUBMIT_OPTS"] = " ".join(o for o in (env.get("SPARK_SUBMIT_OPTS"), sparkkit.JVM_OPTIONS) if o)
    code = "from jobchain_spark.cli import main; main(prog_name='jobchain-spark')"
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        stdin=subprocess.DEVNULL,
        check=False,
    )


def _error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("error:")]


def _debug(*args: str) -> tuple[Result, str]:
    """``jobchain-spark --debug ARGS`` in this process: its result and the trace Python would print."""
    result = CliRunner().invoke(main, ["--debug", *args])
    assert result.exception is not None, result.output
    assert not isinstance(result.exception, SystemExit), result.output
    return result, "".join(traceback.format_exception(result.exception))


def test_a_bad_url_is_one_line_and_debug_shows_the_trace(tmp_path: Path) -> None:
    plain = _run("report", "--url", "nosuch://x/y", "--out", "out", cwd=tmp_path)
    assert plain.returncode == 2
    assert plain.stderr.strip().splitlines() == _error_lines(plain.stderr)
    [line] = _error_lines(plain.stderr)
    assert "option 'url'" in line
    assert "nosuch://" in line
    assert "--debug" in line
    debug, trace = _debug("report", "--url", "nosuch://x/y", "--out", str(tmp_path / "out"))
    assert debug.exit_code != 0
    assert not _error_lines(debug.stderr)  # not the one line: the exception itself
    assert type(debug.exception).__name__ == "BackendNotInstalledError"
    assert "nosuch://" in trace


def _unreadable_archive(root: Path) -> Path:
    """A verified run whose jobs table holds a file that is not Parquet."""
    (root / "_runs").mkdir(parents=True)
    (root / "jobs").mkdir()
    manifest = {"run_id": "r1", "state": "verified", "cutoff": "2024-01-01T00:00:00+00:00"}
    (root / "_runs" / "r1.json").write_text(json.dumps(manifest))
    (root / "jobs" / "part-00000.parquet").write_text("not parquet at all")
    return root


@pytest.mark.spark
@pytest.mark.timeout(900)
def test_a_spark_error_is_one_line_and_debug_shows_the_java_trace(
    spark: Any, sqlite_url: str, tmp_path: Path
) -> None:
    async def seed() -> None:
        state = await open_state(sqlite_url)
        try:
            await sparkkit.create(state, "resize", 3, sparkkit.T0)
        finally:
            await state.close()

    asyncio.run(seed())
    archive = str(_unreadable_archive(tmp_path / "archive"))
    args = (
        "report",
        "--url",
        sqlite_url,
        "--archive",
        archive,
        "--out",
        str(tmp_path / "out"),
        "--master",
        "local[1]",
    )
    plain = _run(*args, cwd=tmp_path)
    assert plain.returncode == 1, plain.stderr[-2000:]
    [line] = _error_lines(plain.stderr)
    # The live tables were read by Spark's Python workers (this interpreter, PYSPARK_PYTHON
    # unset), then the archive failed: the line names the file and the cause.
    assert "part-00000.parquet" in line
    assert "not a Parquet file" in line
    assert not [m for m in TRACE_MARKS if m in plain.stderr], plain.stderr[-2000:]
    # --debug on the tests' session (the command takes the active one; its --master then has
    # no effect), whose session settings the command's builder overwrites: put them back.
    with _session_conf_kept(spark):
        debug, trace = _debug(*args)
    assert debug.exit_code != 0
    assert not _error_lines(debug.stderr)
    assert "\tat org.apache.spark" in trace
    assert "part-00000.parquet" in trace


@contextmanager
def _session_conf_kept(spark: Any) -> Iterator[None]:
    before = dict(spark.conf.getAll)
    try:
        yield
    finally:
        for key, value in dict(spark.conf.getAll).items():
            if key not in before:
                spark.conf.unset(key)
            elif before[key] != value:
                spark.conf.set(key, before[key])


def test_a_worker_error_carried_by_spark_is_summarised_by_its_last_line() -> None:
    carried = RuntimeError(
        "[PYTHON_DATA_SOURCE_ERROR] Failed to plan Python data source read\n"
        'Traceback (most recent call last):\n  File "reader.py", line 3, in parse\n'
        "jobchain_spark.errors.UnknownTableError: option 'table': unknown table 'queue'\n"
        "\tat org.apache.spark.sql.Foo.bar(Foo.scala:1)\n"
    )
    assert one_line(carried) == "UnknownTableError: option 'table': unknown table 'queue'"
    assert one_line(UnknownTableError("table", "unknown")) == "option 'table': unknown"
    assert one_line(ValueError("bad\nsecond line")) == "ValueError: bad"


def test_the_session_helper_points_unset_python_variables_at_this_interpreter(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    monkeypatch.setenv("PYSPARK_DRIVER_PYTHON", "/opt/custom/python")
    assert use_this_python() == {"PYSPARK_PYTHON": sys.executable}
    assert os.environ["PYSPARK_PYTHON"] == sys.executable
    assert os.environ["PYSPARK_DRIVER_PYTHON"] == "/opt/custom/python"


# ---------------------------------------------------------------- archive: --statuses, --dry-run


async def _seed_done_and_dead(url: str) -> dict[str, str]:
    """A chain completed on day 0 and a dead letter (a chain failed for good on day 1)."""
    state = await open_state(url)
    try:
        [done] = await sparkkit.create(state, "resize", 1, sparkkit.T0)
        await sparkkit.run(state, done, started=sparkkit.T0, finished=sparkkit.T0 + timedelta(minutes=1))
        [dead] = await sparkkit.create(state, "resize", 1, sparkkit.T0 + timedelta(days=1))
        await sparkkit.fail(state, dead, at=sparkkit.T0 + timedelta(days=1, minutes=5), error="card expired")
    finally:
        await state.close()
    return {"done": done.id, "dead": dead.id}


def test_archive_rejects_a_bad_status_in_one_line_and_changes_nothing(
    sqlite_url: str, tmp_path: Path
) -> None:
    ids = asyncio.run(_seed_done_and_dead(sqlite_url))
    root = tmp_path / "archive"
    args = ("archive", "--url", sqlite_url, "--older-than", "1d", "--to", str(root))
    plain = _run(*args, "--statuses", "completed,faild", cwd=tmp_path)
    assert plain.returncode == 2, plain.stderr[-2000:]
    assert plain.stderr.strip().splitlines() == _error_lines(plain.stderr)
    [line] = _error_lines(plain.stderr)
    assert "option 'statuses': unknown status 'faild'; choose from completed, cancelled, failed" in line
    live = _run(*args, "--statuses", "running", cwd=tmp_path)
    assert live.returncode == 2
    [line] = _error_lines(live.stderr)
    assert "'running' chains are live work and are never archived" in line
    assert not root.exists()
    assert asyncio.run(sparkkit.chain_ids(sqlite_url)) == set(ids.values())


@pytest.mark.spark
@pytest.mark.timeout(900)
def test_archive_dry_run_says_what_would_go_and_the_default_keeps_dead_letters(
    spark: Any, sqlite_url: str, tmp_path: Path
) -> None:
    ids = asyncio.run(_seed_done_and_dead(sqlite_url))
    root = tmp_path / "archive"
    args = ["archive", "--url", sqlite_url, "--older-than", "1d", "--to", str(root)]
    day0 = "2024-03-01 00:01:00 UTC"
    # In this process, on the tests' session (see --debug above): three runs, one JVM.
    with _session_conf_kept(spark):
        try:
            dry = CliRunner().invoke(main, [*args, "--dry-run"])
            assert dry.exit_code == 0, dry.output
            assert "failed chains stay: add failed to --statuses" in dry.output
            assert f"would archive 1 chains (completed 1) finished {day0} to {day0}, 1 jobs" in dry.output
            assert "nothing was written or deleted" in dry.output
            every = CliRunner().invoke(main, [*args, "--dry-run", "--statuses", "completed,cancelled,failed"])
            assert every.exit_code == 0, every.output
            assert (
                "would archive 2 chains (completed 1, failed 1) finished 2024-03-01 00:01:00 UTC"
                in every.output
            )
            assert not root.exists()
            assert asyncio.run(sparkkit.chain_ids(sqlite_url)) == set(ids.values())

            real = CliRunner().invoke(main, args)
            assert real.exit_code == 0, real.output
            assert "archived 1 chains (completed 1)" in real.output
            assert asyncio.run(sparkkit.chain_ids(sqlite_url)) == {ids["dead"]}
        finally:
            spark.sparkContext.setLogLevel("ERROR")
