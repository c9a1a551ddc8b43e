"""The report page in a real browser: a realistic history rendered and opened in headless Chromium.

The history has 24 job types over a day: one with 20,000 jobs and one with 3; a three-step
chain type (order → charge → ship); some types fail now and then with real Python tracebacks
(plain, chained with a multi-line message, and a plain message) and are retried half an hour
later; the last hours of the large type are left unprocessed, so its backlog grows. Jobs are
created, claimed and completed through the state adapter's own operations with explicit
times, in batches (one transaction per type and hour), so seeding takes seconds on SQLite.

The page is opened at 1,400 px: the screenshot must not be one flat colour, nothing may
overflow horizontally, every chart must have loaded and the headings must be human names.
Set ``JOBCHAIN_REPORT_SCREENSHOT=path.png`` to keep a screenshot (docs/images/spark-report.png
is made this way). Without /usr/bin/chromium the test skips, unless ``CI=true``.
"""

from __future__ import annotations

import asyncio
import io
import os
import random
import re
import traceback
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Final

import pytest
import sparkkit

from jobchain.connect_backends import open_state
from jobchain.contracts.state import (
    JobComplete,
    JobReschedule,
    JobsAcquire,
    JobsCreate,
    NewJob,
    StateAdapter,
    StateTx,
)
from jobchain.entities import Job, Schedule, new_id
from jobchain_spark.report import build_report
from jobchain_spark.report_output import CHARTS, write_report

pytestmark = [pytest.mark.spark, pytest.mark.timeout(900)]

CHROMIUM: Final = "/usr/bin/chromium"
WIDTH: Final = 1400
HOURS: Final = 24
SMALL_TYPES: Final = (
    ("send_email", 2400), ("resize_image", 1800), ("sync_crm", 900), ("index_document", 700),
    ("bill_invoice", 480), ("export_csv", 300), ("notify_slack", 260), ("geocode", 200),
    ("refresh_cache", 150), ("score_lead", 120), ("thumbnail", 96), ("transcode", 72),
    ("webhook_out", 60), ("archive_log", 48), ("dedupe_contact", 40), ("import_feed", 30),
    ("tag_photo", 24), ("translate", 20), ("pdf_render", 12), ("warm_search", 8),
)  # fmt: skip
SIZES: Final = {"ingest_event": 20_000, "rare_audit": 3, **dict(SMALL_TYPES)}
FAILING: Final = {"sync_crm": 0.2, "webhook_out": 0.3, "geocode": 0.1, "charge": 0.15, "ingest_event": 0.01}
STEPS: Final = {"order": "charge", "charge": "ship"}
ORDERS_PER_HOUR: Final = 20
UNPROCESSED_HOURS: Final = 3  # ingest_event's last hours: created, never claimed


def _stored_error(kind: int) -> str:
    """A real error as the worker stores it (``traceback.format_exception``), or a plain one."""

    def fail() -> None:
        if kind == 0:
            raise ValueError("bad input: missing field 'sku'")
        if kind == 1:
            try:
                {}["customer"]
            except KeyError as exc:
                raise RuntimeError("upstream CRM rejected the record\nstatus 422") from exc
        raise TimeoutError("upstream took longer than 30 s")

    if kind == 3:
        return "released: the worker shut down before the attempt finished"
    try:
        fail()
    except Exception as exc:
        return "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)).strip()
    raise AssertionError("fail() always raises")


ERRORS: Final = tuple(_stored_error(kind) for kind in range(4))


def _per_hour(total: int) -> list[int]:
    return [(h + 1) * total // HOURS - h * total // HOURS for h in range(HOURS)]


async def _create(state: StateAdapter, names: list[str], now: datetime) -> None:
    jobs = [NewJob(id=new_id(), type_name=n, chain_type_name=n, input={"n": i}) for i, n in enumerate(names)]
    async with state.transaction() as tx:
        await tx.jobs_create(JobsCreate(jobs=jobs, now=now))


async def _finish(tx: StateTx, job: Job, finished: datetime) -> None:
    following = STEPS.get(job.type_name)
    if following is not None:
        step = NewJob(
            id=new_id(),
            type_name=following,
            chain_type_name=job.chain_type_name,
            chain_id=job.chain_id,
            chain_index=job.chain_index + 1,
            input={"from": job.id},
        )
        await tx.jobs_create(JobsCreate(jobs=[step], now=finished))
    await tx.job_complete(JobComplete(job_id=job.id, worker_id="w1", now=finished))


async def _work(state: StateAdapter, type_name: str, now: datetime, rng: random.Random) -> None:
    """Claim every eligible job of ``type_name`` at ``now``; fail some, complete (or continue) the rest."""
    claim = JobsAcquire(
        type_names=[type_name], worker_id="w1", lease_for=timedelta(hours=2), limit=50_000, now=now
    )
    async with state.transaction() as tx:
        jobs = (await tx.jobs_acquire(claim)).jobs
    async with state.transaction() as tx:
        for job in jobs:
            # Run times differ by type (1 s to a few minutes) and spread within a type.
            finished = now + timedelta(seconds=rng.lognormvariate(len(type_name) % 6, 0.8))
            if rng.random() < FAILING.get(type_name, 0.0):
                error = ERRORS[rng.randrange(len(ERRORS))]
                retry = Schedule(at=finished + timedelta(minutes=30))
                await tx.job_reschedule(
                    JobReschedule(job_id=job.id, schedule=retry, error=error, worker_id="w1", now=finished)
                )
            else:
                await _finish(tx, job, finished)


async def seed_history(url: str, start: datetime) -> None:
    """Write the whole history into the (migrated, empty) state at ``url``."""
    rng = random.Random(15)
    state = await open_state(url)
    try:
        plan = {name: _per_hour(total) for name, total in SIZES.items()}
        for hour in range(HOURS):
            at = start + timedelta(hours=hour)
            for name, counts in plan.items():
                if counts[hour]:
                    await _create(state, [name] * counts[hour], at + timedelta(seconds=rng.uniform(0, 900)))
            await _create(state, ["order"] * ORDERS_PER_HOUR, at + timedelta(seconds=rng.uniform(0, 900)))
            for name in [*plan, *STEPS, "ship"]:
                if name == "ingest_event" and hour >= HOURS - UNPROCESSED_HOURS:
                    continue
                await _work(state, name, at + timedelta(minutes=20 + len(name)), rng)
    finally:
        await state.close()


def _chromium_or_skip() -> None:
    try:
        import playwright.sync_api  # noqa: F401 -- only whether it is installed
    except ImportError:
        reason = "playwright is not installed (pip install -r requirements-dev.txt)"
    else:
        if Path(CHROMIUM).is_file():
            return
        reason = f"no Chromium at {CHROMIUM} (apt-get install chromium)"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{reason}; CI=true: a missing browser fails the run", pytrace=False)
    pytest.skip(reason)


def _not_flat(png: bytes) -> bool:
    """True when the PNG has more than one colour (a blank page renders as one)."""
    from matplotlib import image

    pixels = image.imread(io.BytesIO(png), format="png")
    return bool((pixels.reshape(-1, pixels.shape[-1]) != pixels[0, 0]).any())


FACTS: Final = """() => ({
    scrollWidth: document.documentElement.scrollWidth,
    images: [...document.images].map(i => [i.getAttribute('src'), i.complete, i.naturalWidth]),
    headings: [...document.querySelectorAll('th')].map(th => th.textContent.trim()),
    widest: Math.max(...[...document.body.querySelectorAll('*')].map(e => e.getBoundingClientRect().right)),
})"""
"""What the test reads from the page: widths, images, table headings."""


def _look(html_path: Path, shot: Path) -> dict[str, Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": WIDTH, "height": 1000})
            page.goto(html_path.as_uri(), wait_until="load")
            facts: dict[str, Any] = page.evaluate(FACTS)
            png = page.screenshot(full_page=False)
            shot.write_bytes(png)
        finally:
            browser.close()
    facts["png"] = png
    return facts


def test_report_page_renders_in_chromium_without_overflow(
    spark: Any, sqlite_url: str, tmp_path: Path
) -> None:
    _chromium_or_skip()
    asyncio.run(seed_history(sqlite_url, sparkkit.T0))
    report = build_report(spark, url=sqlite_url, period="hour", now=sparkkit.T0 + timedelta(hours=HOURS))
    summary = report.tables["summary"].set_index("type_name")
    assert summary.loc["ingest_event", "jobs"] == 20_000
    assert summary.loc["rare_audit", "jobs"] == 3
    errors = report.tables["errors"]
    assert "Traceback (most recent call last):" not in set(errors["example"])
    assert {
        "ValueError: bad input: missing field 'sku'",
        "RuntimeError: upstream CRM rejected the record",
    } <= set(errors["example"])
    steps = report.tables["chain_steps"]
    assert list(steps[steps["chain_type"] == "order"]["type_name"]) == ["order", "charge", "ship"]

    html_path = write_report(report, tmp_path / "out")
    facts = _look(html_path, tmp_path / "report.png")
    png = facts["png"]
    assert png.startswith(b"\x89PNG\r\n\x1a\n")
    assert _not_flat(png), "the screenshot is one flat colour"
    assert facts["scrollWidth"] <= WIDTH, f"the page overflows: {facts['scrollWidth']} px wide"
    assert facts["widest"] <= WIDTH
    loaded = {src: width for src, complete, width in facts["images"] if complete}
    assert set(loaded) == {f"charts/{name}" for name in CHARTS.values()}
    assert all(width > 0 for width in loaded.values()), loaded
    headings = facts["headings"]
    assert {"Job type", "Started", "Backlog at end", "p99", "Chain type", "Error type"} <= set(headings)
    assert not [h for h in headings if re.search(r"_|\bs$", h)], "raw column names on the page"
    keep = os.environ.get("JOBCHAIN_REPORT_SCREENSHOT")
    if keep:
        Path(keep).write_bytes(png)
