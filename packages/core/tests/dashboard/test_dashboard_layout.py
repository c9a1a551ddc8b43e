"""Wide tables fit their card in a real browser: the overview's queue table, with ten job
types of long names in every state, overflowed its card even at 1,920 px and pushed the Pause
buttons out of sight. At 1,280 and 1,920 px every table of the main pages ends inside its card,
and every Pause button is on screen without scrolling sideways.

Debian's Chromium through Playwright, on the SQLite stack of test_dashboard_browser (missing
Chromium skips, or fails under ``CI=true``, as there)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any, Final

import pytest

from jobchain import Client, JobTypes, Schedule
from jobchain.contracts.state import JobComplete, JobFail, JobsAcquire
from jobchain.dashboard.formatting import breakable
from jobchain.entities import AttemptError, utcnow

from .test_dashboard_browser import Stack, login
from .test_dashboard_browser import stack as stack  # the fixture, which tests take by name

pytestmark = [pytest.mark.timeout(300)]

TYPE_NAMES: Final = [f"shop.fulfilment.warehouse_reservation_long_name_{n}" for n in range(10)]
ERRORS: Final = ["CardExpired", "WarehouseReservationTimeoutError", "InventoryLedgerConflictError"]
WIDTHS: Final = [1280, 1920]

TABLES_FIT: Final = """() => [...document.querySelectorAll('table')].map((table, n) => {
    const card = table.closest('.card');
    const box = table.getBoundingClientRect();
    const cardBox = card.getBoundingClientRect();
    // Any scrolling box between the table and its card must not need to scroll.
    const scrollers = [];
    for (let e = table.parentElement; e && e !== card.parentElement; e = e.parentElement) {
        if (e.scrollWidth > e.clientWidth + 1) scrollers.push(e.className || e.tagName);
    }
    return {n, cls: table.className, right: box.right, scrollWidth: table.scrollWidth,
            width: box.width, cardRight: cardBox.right, scrollers};
})"""

PAUSE_VISIBLE: Final = """() => [...document.querySelectorAll('button[data-action="pause"]')].map(button => {
    // Scroll down to the button, never sideways: it must be on screen as the page opens.
    window.scrollTo(0, button.getBoundingClientRect().top + window.scrollY - 100);
    const box = button.getBoundingClientRect();
    const x = box.left + box.width / 2, y = box.top + box.height / 2;
    const hit = document.elementFromPoint(x, y);
    return {type: button.closest('tr').dataset.type, left: box.left, right: box.right,
            width: box.width, height: box.height, viewport: document.documentElement.clientWidth,
            hit: hit !== null && (hit === button || button.contains(hit))};
})"""


async def _seed(client: Client) -> None:
    """Each long-named type with jobs due, scheduled, running, completed and failed (three
    error types each: the "failed by error" row under it)."""
    types = JobTypes()
    for name in TYPE_NAMES:
        types.define(name, input=dict, output=dict, entry=True)
    shop = Client(client.state, None, types)  # the same opened adapter: not closed here
    async with shop.transaction() as tx:
        for name in TYPE_NAMES:
            for n in range(6):
                await shop.start_chain(tx, name, {"n": n})
            await shop.start_chain(tx, name, {"later": True}, schedule=Schedule(after=timedelta(hours=1)))
    now = utcnow()
    async with client.state.transaction() as stx:
        for name in TYPE_NAMES:
            claim = JobsAcquire(
                type_names=[name], worker_id="w-layout", lease_for=timedelta(hours=1), limit=5, now=now
            )
            jobs = (await stx.jobs_acquire(claim)).jobs
            assert len(jobs) == 5
            done, *failing, _running = jobs
            await stx.job_complete(
                JobComplete(
                    job_id=done.id,
                    output={},
                    worker_id="w-layout",
                    lease_generation=done.lease_generation,
                    now=now,
                )
            )
            for job, error_type in zip(failing, ERRORS, strict=True):
                message = f"reservation for order ORD-{job.id[-5:]} could not be confirmed in time"
                error = AttemptError(
                    attempt=1,
                    worker_id="w-layout",
                    error_type=error_type,
                    message=message,
                    traceback="",
                    at=now,
                )
                await stx.job_fail(
                    JobFail(
                        job_id=job.id,
                        error=f"{error_type}: {message}",
                        worker_id="w-layout",
                        lease_generation=job.lease_generation,
                        attempt_error=error,
                        now=now,
                    )
                )


def _overflowing(tables: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [t for t in tables if t["right"] > t["cardRight"] + 0.5 or t["scrollers"]]


def test_type_names_break_after_dots_and_underscores_and_stay_escaped() -> None:
    assert str(breakable("shop.fulfilment_x")) == "shop.<wbr>fulfilment_<wbr>x"
    assert str(breakable("<b>'a'.b")) == "&lt;b&gt;&#39;a&#39;.<wbr>b"
    assert str(breakable(None)) == ""


# The layout does not depend on the backend: the SQLite stack alone.
@pytest.mark.parametrize("stack", ["sqlite"], indirect=True)
async def test_wide_tables_fit_their_card_and_the_pause_buttons_show(stack: Stack) -> None:
    from playwright.async_api import expect

    await _seed(stack.client)
    await login(stack)
    page = stack.page
    for width in WIDTHS:
        await page.set_viewport_size({"width": width, "height": 900})
        for path in ("/", "/jobs?status=failed", "/chains"):
            await page.goto(stack.base + path)
            await expect(page.locator("table").first).to_be_visible()
            tables = await page.evaluate(TABLES_FIT)
            assert tables, f"no table on {path}"
            assert _overflowing(tables) == [], f"tables wider than their card on {path} at {width} px"
        await page.goto(stack.base + "/")
        await expect(page.locator(f'tr[data-type="{TYPE_NAMES[-1]}"]')).to_be_visible()
        buttons = await page.evaluate(PAUSE_VISIBLE)
        assert len(buttons) == len(TYPE_NAMES)
        hidden = [
            b
            for b in buttons
            if not (
                b["hit"]
                and b["width"] > 0
                and b["height"] > 0
                and b["left"] >= 0
                and b["right"] <= b["viewport"]
            )
        ]
        assert hidden == [], f"Pause buttons off screen at {width} px"
    assert stack.errors == [], f"console errors {stack.errors}"
