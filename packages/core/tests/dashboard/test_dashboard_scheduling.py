"""The dashboard's scheduling controls over memory:// and SQLite (see conftest): the paused badge
and the pause/resume buttons of the overview, their actions, and the schedules page."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest

from jobchain import Client
from jobchain.contracts.scheduling import ScheduleRegistration, SchedulesRegister
from jobchain.dashboard import create_app
from jobchain.entities import utcnow

from .conftest import Browser, Seeded, csrf_of, settings

pytestmark = pytest.mark.timeout(120)


def type_row(page: str, type_name: str) -> str:
    found = re.search(rf'<tr[^>]*data-type="{re.escape(type_name)}".*?</tr>', page, re.S)
    assert found, f"no row for {type_name}"
    return found.group(0)


def schedule_row(page: str, name: str) -> str:
    found = re.search(rf'<tr[^>]*data-schedule="{re.escape(name)}".*?</tr>', page, re.S)
    assert found, f"no row for schedule {name}"
    return found.group(0)


async def paused_names(client: Client) -> list[str]:
    return [p.type_name for p in await client.paused_types()]


async def test_pause_and_resume_from_the_overview(browser: Browser, client: Client, seeded: Seeded) -> None:
    page = (await browser.get("/")).text
    emails = type_row(page, "send_email")
    assert "data-paused" not in emails
    assert 'data-action="pause"' in emails
    assert 'data-action="resume"' not in emails
    response = await browser.post_from("/", "/actions/pause", type="send_email")
    assert response.status_code == 303
    assert response.headers["location"] == "/?done=paused&subject=send_email"
    assert await paused_names(client) == ["send_email"]
    after = (await browser.get(response.headers["location"])).text
    assert "Job type send_email paused" in after
    emails = type_row(after, "send_email")
    assert "data-paused" in emails
    assert 'data-action="resume"' in emails
    assert 'data-action="pause"' not in emails
    assert "data-paused" not in type_row(after, "flaky")
    resumed = await browser.post_from("/", "/actions/resume", type="send_email")
    assert resumed.status_code == 303
    assert await paused_names(client) == []
    assert "Job type send_email resumed." in (await browser.get(resumed.headers["location"])).text


async def test_a_paused_type_without_jobs_is_listed(browser: Browser, client: Client) -> None:
    await client.pause("nightly_export")
    page = (await browser.get("/")).text
    row = type_row(page, "nightly_export")
    assert "data-paused" in row
    assert 'data-action="resume"' in row
    assert "No jobs yet." not in page


async def test_refused_pause_requests_change_nothing(
    browser: Browser, client: Client, seeded: Seeded
) -> None:
    no_token = await browser.http.post("/actions/pause", data={"type": "send_email", "next": "/"})
    assert no_token.status_code == 403
    cross_site = await browser.http.post(
        "/actions/pause",
        data={"csrf_token": csrf_of((await browser.get("/")).text), "type": "send_email"},
        headers={"origin": "https://evil.example"},
    )
    assert cross_site.status_code == 403
    for bad in ("", "bad name!", "x" * 300):
        refused = await browser.post_from("/", "/actions/pause", type=bad)
        assert refused.status_code == 400, bad
    assert "type:" in refused.text
    assert await paused_names(client) == []


async def test_read_only_shows_the_badge_but_no_buttons(client: Client, seeded: Seeded) -> None:
    await client.pause("send_email")
    web = Browser(create_app(client, settings(read_only=True)))
    await web.login()
    page = (await web.get("/")).text
    assert "data-paused" in type_row(page, "send_email")
    assert "/actions/pause" not in page
    assert "/actions/resume" not in page
    token = csrf_of(page)
    for action in ("pause", "resume"):
        response = await web.http.post(f"/actions/{action}", data={"csrf_token": token, "type": "flaky"})
        assert response.status_code == 403
    assert await paused_names(client) == ["send_email"]
    await web.aclose()


async def test_schedules_page(browser: Browser, client: Client, seeded: Seeded) -> None:
    empty = await browser.get("/schedules")
    assert empty.status_code == 200
    assert "No schedule registered." in empty.text
    assert 'aria-current="page">Schedules' in empty.text
    now = utcnow()
    rows = [
        (
            ScheduleRegistration(
                name="daily-digest",
                cron="0 7 * * *",
                timezone="Europe/Paris",
                type_name="send_email",
                catch_up=True,
                worker_name="worker-a",
                next_tick_at=now + timedelta(hours=3),
                last_tick_at=now - timedelta(hours=21),
                last_chain_id=seeded.completed,
            ),
            now,
        ),
        (
            ScheduleRegistration(
                name="<b>old</b>",
                cron="*/5 * * * *",
                timezone="UTC",
                type_name="flaky",
                catch_up=False,
                worker_name="worker-b",
            ),
            now - timedelta(days=2),
        ),
    ]
    for registration, seen in rows:
        async with client.state.transaction() as stx:
            await stx.schedules_register(SchedulesRegister(schedules=[registration], now=seen))
    page = (await browser.get("/schedules")).text
    digest = schedule_row(page, "daily-digest")
    assert "0 7 * * *" in digest
    assert "Europe/Paris" in digest
    assert f'href="/chains/{seeded.completed}"' in digest
    assert "in 2 h 59 min" in digest or "in 3 h 0 min" in digest
    assert "data-stale" not in digest
    old = schedule_row(page, "&lt;b&gt;old&lt;/b&gt;")  # a name is user data: escaped
    assert "data-stale" in old
    assert "no catch-up" in old
    assert "<b>old</b>" not in page


async def test_chain_page_shows_the_ordering_key_and_priority(browser: Browser, client: Client) -> None:
    send_email = client.job_types.get("send_email")
    async with client.transaction() as tx:
        first = await client.start_chain(tx, send_email, {"to": "a"}, priority=9, ordering_key="<k>")
        second = await client.start_chain(tx, send_email, {"to": "b"}, ordering_key="<k>")
    page = (await browser.get(f"/chains/{first.id}")).text
    assert re.search(r'data-field="ordering-key">&lt;k&gt;', page)
    assert 'data-field="priority">9<' in page
    after = (await browser.get(f"/chains/{second.id}")).text
    assert 'data-field="ordering-key"' in after
    assert 'data-field="priority"' not in after  # the default 0 is not shown
    assert f"/chains/{first.id}" in after  # its blocker: the key's previous chain
