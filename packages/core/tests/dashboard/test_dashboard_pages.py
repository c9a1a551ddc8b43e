"""Every dashboard page and action, in-process over memory:// and SQLite (see conftest)."""

from __future__ import annotations

import asyncio
import html
import re
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from jobchain import Client, JobStatus
from jobchain.dashboard import create_app
from jobchain.worker import Attempt, Completed, Processors, Worker

from .conftest import BOUND, Browser, Seeded, settings, wait_until

pytestmark = pytest.mark.timeout(120)


def row(page: str, attribute: str, value: str) -> str:
    """The HTML of the table row (or section) whose ``data-<attribute>`` is ``value``."""
    found = re.search(rf'<(tr|section)[^>]*data-{attribute}="{re.escape(value)}".*?</\1>', page, re.S)
    assert found, f"no element with data-{attribute}={value!r} on the page"
    return found.group(0)


def count(html_row: str, name: str) -> int:
    found = re.search(rf'data-count="{name}">(?:<a[^>]*>)?(\d+)', html_row)
    assert found, f"no {name} count in the row"
    return int(found.group(1))


def figure(page: str, name: str) -> str:
    found = re.search(rf'data-figure="{name}"[^>]*>([^<]*)<', page)
    assert found, f"no {name} figure on the page"
    return found.group(1).strip()


# ---------------------------------------------------------------- overview


async def test_overview_shows_counts_per_type_and_totals(browser: Browser, seeded: Seeded) -> None:
    page = (await browser.get("/")).text
    emails = row(page, "type", "send_email")
    assert count(emails, "due") == 3
    assert count(emails, "scheduled") == 1
    assert count(emails, "completed") == 1
    assert count(emails, "failed") == 0
    flaky = row(page, "type", "flaky")
    assert count(flaky, "failed") == 2
    assert "FailJob" in page  # failed by error type
    assert count(row(page, "type", "report"), "blocked") == 1
    assert count(row(page, "type", "publish_image"), "due") == 1
    assert figure(page, "due") == "5"  # 3 e-mails, the blocker and the continuation (resize_image)
    assert figure(page, "failed") == "2"
    assert figure(page, "blocked") == "1"
    assert '<svg class="chart"' in page
    assert "2 failed</title>" in page  # the throughput chart's title counts the last hour


async def test_overview_of_an_empty_queue(client: Client) -> None:
    web = Browser(create_app(client, settings()))
    await web.login()
    page = (await web.get("/")).text
    assert "No jobs yet." in page
    assert "No live worker." in page
    await web.aclose()


# ---------------------------------------------------------------- chains list


async def test_chains_list_filters_by_type_and_status(browser: Browser, seeded: Seeded) -> None:
    page = (await browser.get("/chains?type=flaky")).text
    assert set(re.findall(r'data-chain="([^"]+)"', page)) == {seeded.failed, seeded.hostile}
    page = (await browser.get("/chains?status=completed")).text
    assert set(re.findall(r'data-chain="([^"]+)"', page)) == {seeded.completed}
    page = (await browser.get("/chains?status=pending&type=send_email")).text
    assert set(re.findall(r'data-chain="([^"]+)"', page)) == {*seeded.pending, seeded.scheduled}


async def test_chains_list_filters_by_created_time(browser: Browser, seeded: Seeded) -> None:
    future = (datetime.now(UTC) + timedelta(days=1)).strftime("%Y-%m-%dT%H:%M:%S")
    past = (datetime.now(UTC) - timedelta(days=1)).strftime("%Y-%m-%dT%H:%M")
    assert "No chain matches." in (await browser.get(f"/chains?created_from={future}")).text
    page = (await browser.get(f"/chains?created_from={past}&created_to={future}")).text
    assert len(re.findall(r'data-chain="', page)) == 10


async def test_chains_list_pages_with_a_cursor(client: Client, seeded: Seeded) -> None:
    web = Browser(create_app(client, settings(page_size=4)))
    await web.login()
    seen: list[str] = []
    url: str | None = "/chains"
    pages = 0
    while url is not None:
        page = (await web.get(url)).text
        seen += re.findall(r'data-chain="([^"]+)"', page)
        pages += 1
        found = re.search(r'<a class="btn" rel="next" href="([^"]+)"', page)
        url = html.unescape(found.group(1)) if found else None
    assert pages == 3
    assert len(seen) == len(set(seen)) == 10
    await web.aclose()


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("status=sleeping", "status must be one of"),
        ("created_from=yesterday", "created_from must be a date and time"),
        ("cursor=not-a-cursor", "cursor"),
    ],
)
async def test_an_invalid_filter_is_a_400_that_says_what_to_change(
    browser: Browser, query: str, message: str
) -> None:
    response = await browser.get(f"/chains?{query}")
    assert response.status_code == 400
    assert message in html.unescape(response.text)


# ---------------------------------------------------------------- one chain


async def test_chain_page_shows_jobs_json_and_errors(browser: Browser, seeded: Seeded) -> None:
    page = (await browser.get(f"/chains/{seeded.continued}")).text
    assert "#0 resize_image" in page
    assert "#1 publish_image" in page
    assert html.escape('"px": 200', quote=False) in page or "&#34;px&#34;: 200" in page
    failed = (await browser.get(f"/chains/{seeded.failed}")).text
    assert "FailJob" in failed
    assert "refused plain" in failed
    assert 'class="traceback"' in failed
    assert "Traceback (most recent call last)" in html.unescape(failed)


async def test_chain_page_draws_the_blocker_graph_both_ways(browser: Browser, seeded: Seeded) -> None:
    blocked = (await browser.get(f"/chains/{seeded.blocked}")).text
    assert '<svg class="graph"' in blocked
    assert f'href="/chains/{seeded.blocker}"' in blocked  # the blocker, drawn and listed
    blocker = (await browser.get(f"/chains/{seeded.blocker}")).text
    assert f'href="/chains/{seeded.blocked}"' in blocker  # the job it blocks


async def test_unknown_or_invalid_chain_is_a_404(browser: Browser) -> None:
    missing = await browser.get("/chains/00000000-0000-7000-8000-000000000000")
    assert missing.status_code == 404
    assert "not found" in missing.text
    invalid = await browser.get("/chains/../../etc/passwd")
    assert invalid.status_code == 404


# ---------------------------------------------------------------- jobs by status and actions


async def test_failed_jobs_page_lists_dead_letters_with_actions(browser: Browser, seeded: Seeded) -> None:
    page = (await browser.get("/jobs")).text
    assert "Failed jobs" in page
    assert set(re.findall(r'data-job="([^"]+)"', page)) == {seeded.failed, seeded.hostile}
    failed_row = row(page, "job", seeded.failed)
    assert 'data-action="retry"' in failed_row
    assert 'data-action="delete"' in failed_row
    assert 'data-action="cancel"' not in failed_row  # a failed chain is not cancellable
    pending = (await browser.get("/jobs?status=pending")).text
    assert 'data-action="cancel"' in row(pending, "job", seeded.pending[0])
    narrowed = (await browser.get("/jobs?status=failed&error_type=TimeoutError")).text
    assert "No failed job" in narrowed


async def test_retry_from_the_page_makes_the_job_pending(
    browser: Browser, client: Client, seeded: Seeded
) -> None:
    response = await browser.post_from("/jobs?status=failed", "/actions/retry", job_id=seeded.failed)
    assert response.status_code == 303
    assert response.headers["location"].startswith("/jobs?status=failed&done=retried")
    job = await client.get_job(seeded.failed)
    assert job is not None
    assert job.status is JobStatus.PENDING
    after = await browser.get(response.headers["location"])
    assert f"Job {seeded.failed} retried." in after.text
    assert seeded.failed not in re.findall(r'data-job="([^"]+)"', after.text)


async def test_cancel_from_the_page_cancels_the_chain(
    browser: Browser, client: Client, seeded: Seeded
) -> None:
    chain_id = seeded.pending[0]
    response = await browser.post_from(f"/chains/{chain_id}", "/actions/cancel", chain_id=chain_id)
    assert response.status_code == 303
    chain = await client.get_chain(chain_id)
    assert chain is not None
    assert chain.status is JobStatus.CANCELLED
    assert chain.last.cancel_reason == "cancelled from the dashboard"
    page = (await browser.get(response.headers["location"])).text
    assert "cancelled from the dashboard" in page


async def test_delete_from_the_page_removes_the_chain(
    browser: Browser, client: Client, seeded: Seeded
) -> None:
    response = await browser.post_from("/jobs?status=failed", "/actions/delete", chain_id=seeded.hostile)
    assert response.status_code == 303
    assert await client.get_chain(seeded.hostile) is None


async def test_refused_actions_say_why_and_change_nothing(
    browser: Browser, client: Client, seeded: Seeded
) -> None:
    # The blocker still blocks the report: deleting it alone is refused.
    refused = await browser.post_from(f"/chains/{seeded.blocker}", "/actions/delete", chain_id=seeded.blocker)
    assert refused.status_code == 409
    assert "cascade" in refused.text
    assert await client.get_chain(seeded.blocker) is not None
    # A completed chain cannot be cancelled; a pending job cannot be retried.
    done = await browser.post_from("/chains", "/actions/cancel", chain_id=seeded.completed)
    assert done.status_code == 409
    again = await browser.post_from("/chains", "/actions/retry", job_id=seeded.pending[1])
    assert again.status_code == 409
    bad_id = await browser.post_from("/chains", "/actions/retry", job_id="not-an-id")
    assert bad_id.status_code == 400
    cascade = await browser.post_from(
        f"/chains/{seeded.blocked}", "/actions/delete", chain_id=seeded.blocked, cascade="on"
    )
    assert cascade.status_code == 303
    assert await client.get_chain(seeded.blocked) is None


async def test_an_action_never_redirects_off_the_dashboard(browser: Browser, seeded: Seeded) -> None:
    page = await browser.get("/chains")
    token = re.search(r'name="csrf_token" value="([^"]+)"', page.text)
    assert token
    for target in ("https://evil.example/", "//evil.example/x", "/\\evil.example", "javascript:alert(1)"):
        response = await browser.http.post(
            "/actions/retry",
            data={"csrf_token": token.group(1), "next": target, "job_id": seeded.failed},
        )
        assert response.status_code in (303, 409)
        if response.status_code == 303:
            assert response.headers["location"].startswith("/?done=retried")


# ---------------------------------------------------------------- workers


async def test_workers_page_shows_live_workers_and_what_they_hold(
    browser: Browser, client: Client, seeded: Seeded
) -> None:
    procs = Processors()
    started = asyncio.Event()
    release = asyncio.Event()

    @procs.handler(client.job_types.get("send_email"))
    async def slow(attempt: Attempt[dict[str, Any], dict[str, Any]]) -> Completed:
        await attempt.prepare("staged")
        started.set()
        async with asyncio.timeout(BOUND):
            await release.wait()
        return await attempt.complete({"sent": True})

    worker = Worker(client, procs, name="mailer", concurrency=1, poll_interval=0.05)
    async with worker:
        async with asyncio.timeout(BOUND):
            await started.wait()
        [held_id] = worker.inflight_job_ids

        async def registered() -> list[Any]:
            return [w for w in await client.list_workers(states=["running"]) if w.name == "mailer"]

        [info] = await wait_until(registered, "the worker's registry row")
        try:
            page = (await browser.get("/workers")).text
            section = row(page, "worker", info.id)
            assert "mailer" in section
            assert "running" in section
            assert f'data-job="{held_id}"' in section
            assert 'data-action="cancel"' in section
            overview = (await browser.get("/")).text
            assert figure(overview, "workers") == "1"  # the seeding worker has stopped
            assert f'data-worker="{info.id}"' in overview
        finally:
            release.set()

        async def done() -> bool:
            job = await client.get_job(held_id)
            return job is not None and job.status is JobStatus.COMPLETED

        await wait_until(done, "the held job to complete")
    page = (await browser.get("/workers")).text
    assert "stopped" in row(page, "worker", info.id)


async def test_retry_all_matching_redrives_every_failed_chain_of_the_filter(
    browser: Browser, client: Client, seeded: Seeded
) -> None:
    page = (await browser.get("/jobs?status=failed&type=send_email")).text
    assert 'data-action="retry-all"' not in page  # nothing failed of that type: nothing to offer
    page_url = "/jobs?status=failed&type=flaky"
    assert 'data-action="retry-all"' in (await browser.get(page_url)).text
    response = await browser.post_from(
        page_url, "/actions/retry-all", status="failed", type="flaky", error_type="FailJob"
    )
    assert response.status_code == 303
    after = (await browser.get(response.headers["location"])).text
    assert "2 chains retried." in after
    for chain_id in (seeded.failed, seeded.hostile):
        assert await status_of(client, chain_id) is JobStatus.PENDING
    none_left = await browser.post_from("/jobs", "/actions/retry-all", status="failed")
    assert "0 chains retried." in (await browser.get(none_left.headers["location"])).text
    refused = await browser.post_from("/jobs", "/actions/retry-all", status="pending")
    assert refused.status_code == 409
    assert "statuses must be" in refused.text


async def status_of(client: Client, job_id: str) -> JobStatus | None:
    job = await client.get_job(job_id)
    return None if job is None else job.status


async def test_a_backend_error_is_a_503_page_that_says_what_happened(client: Client) -> None:
    web = Browser(create_app(client, settings()))
    await web.login()
    await client.close()  # what a lost database looks like from here: every call raises
    response = await web.get("/chains")
    assert response.status_code == 503
    assert "closed" in response.text
    assert response.headers["content-security-policy"]
    await web.aclose()
