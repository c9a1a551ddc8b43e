"""``jobchain jobs list`` on a narrow terminal: the LAST ERROR column never splits a word over
two lines (an operator read "CardExpi" / "red:" as two words). A word too long for the column
is cut with an ellipsis; the others wrap at spaces."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner

import jobchain
from jobchain import JobTypes
from jobchain.cli import main
from jobchain.contracts.state import JobFail, JobsAcquire
from jobchain.entities import AttemptError, utcnow

ERROR_TYPE = "CardExpired"
MESSAGE = "card 4242 for order ORD-12345 expired"
WORDS = f"{ERROR_TYPE}: {MESSAGE}".split()
TYPES = JobTypes()
CHARGE = TYPES.define("charge", input=int, output=int, entry=True)


async def _seed(url: str) -> None:
    client = await jobchain.connect(url, notify="none", job_types=TYPES, migrate=True)
    async with client:
        async with client.transaction() as tx:
            await client.start_chain(tx, CHARGE, 1)
        now = utcnow()
        async with client.state.transaction() as stx:
            claim = JobsAcquire(
                type_names=["charge"], worker_id="w-1", lease_for=timedelta(minutes=1), now=now
            )
            [job] = (await stx.jobs_acquire(claim)).jobs
            error = AttemptError(
                attempt=1, worker_id="w-1", error_type=ERROR_TYPE, message=MESSAGE, traceback="", at=now
            )
            await stx.job_fail(
                JobFail(
                    job_id=job.id,
                    error=f"{ERROR_TYPE}: {MESSAGE}",
                    worker_id="w-1",
                    lease_generation=job.lease_generation,
                    attempt_error=error,
                    now=now,
                )
            )


@pytest.fixture
def url(tmp_path: Path) -> str:
    located = f"sqlite:///{tmp_path / 'jobs.db'}"
    asyncio.run(_seed(located))
    return located


def _error_column(output: str) -> list[str]:
    """The LAST ERROR cell's lines: the text under the header (the last column), below its rule."""
    lines = output.splitlines()
    [header] = [n for n, line in enumerate(lines) if "LAST ERROR" in line]
    start = lines[header].index("LAST ERROR")
    return [line[start:].strip() for line in lines[header + 2 :] if line[start:].strip()]


# Below ~100 columns the id and the one-line columns take the whole width and LAST ERROR gets
# none (rich gives up wrapping columns' width first): these are the widths where it shows.
@pytest.mark.parametrize("columns", [100, 110, 120, 140])
def test_the_last_error_never_splits_a_word(url: str, columns: int) -> None:
    result = CliRunner().invoke(
        main,
        ["jobs", "list", "--status", "failed"],
        env={"JOBCHAIN_STATE_URL": url, "JOBCHAIN_NOTIFY_URL": "none", "COLUMNS": str(columns)},
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    assert max(len(line) for line in result.stdout.splitlines()) <= columns, result.stdout
    cell = _error_column(result.stdout)
    assert cell, result.stdout
    shown = " ".join(cell).split()
    for piece in shown:
        # Each piece is a whole word of the error, or a word's head cut with an ellipsis.
        whole = piece in WORDS
        cut = piece.endswith("…") and any(word.startswith(piece[:-1]) for word in WORDS)
        assert whole or cut, f"{piece!r} is part of a split word at {columns} columns:\n{result.stdout}"
    assert shown[0].startswith("Card"), result.stdout
