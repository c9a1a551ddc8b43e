"""The failed-jobs page groups errors by fingerprint (issue 36, deliver 5): errors differing
only in the values they carry are one group, with an example and the distinct messages.

Seeded through the state adapter's own operations (memory:// and SQLite, see conftest), as a
worker records a failure: an error history entry per failed attempt, then ``job_fail``."""

from __future__ import annotations

import html
import re
from datetime import timedelta

import pytest

from jobchain import Client
from jobchain.contracts.state import JobFail, JobsAcquire, JobsCreate, NewJob
from jobchain.entities import AttemptError, new_id, utcnow

from .conftest import Browser

pytestmark = pytest.mark.timeout(120)

CARD = "CardExpired: card for order <id> expired on <n>"


async def fail_jobs(client: Client, errors: list[tuple[str, str]]) -> list[str]:
    """One failed ``flaky`` job per (error type, message), each failed on its first attempt."""
    state = client.state
    now = utcnow() - timedelta(minutes=5)
    jobs = [
        NewJob(id=new_id(), type_name="flaky", chain_type_name="flaky", input={"n": i})
        for i in range(len(errors))
    ]
    async with state.transaction() as tx:
        await tx.jobs_create(JobsCreate(jobs=jobs, now=now))
    async with state.transaction() as tx:
        claimed = await tx.jobs_acquire(
            JobsAcquire(
                type_names=["flaky"], worker_id="w1", lease_for=timedelta(hours=1), now=now, limit=len(jobs)
            )
        )
    assert len(claimed.jobs) == len(jobs)
    by_id = {job.id: error for job, error in zip(jobs, errors, strict=True)}
    for i, job in enumerate(claimed.jobs):
        kind, message = by_id[job.id]
        at = now + timedelta(seconds=i)
        entry = AttemptError(attempt=job.attempt, worker_id="w1", error_type=kind, message=message, at=at)
        async with state.transaction() as tx:
            await tx.job_fail(
                JobFail(job_id=job.id, error=message, worker_id="w1", attempt_error=entry, now=at)
            )
    return list(by_id)


def groups(page: str) -> dict[str, tuple[int, int, str]]:
    """Fingerprint → (jobs, distinct messages, example) of the page's error groups."""
    found = {}
    for match in re.finditer(r'<tr data-group="([^"]*)">(.*?)</tr>', page, re.S):
        cells = re.findall(r"<td[^>]*>(.*?)</td>", match.group(2), re.S)
        jobs = re.search(r'data-count="jobs">(?:<a[^>]*>)?(\d+)', match.group(2))
        messages = re.search(r'data-count="messages">(\d+)', match.group(2))
        assert jobs, match.group(0)
        assert messages, match.group(0)
        found[html.unescape(match.group(1))] = (
            int(jobs.group(1)),
            int(messages.group(1)),
            html.unescape(cells[1]),
        )
    return found


async def test_44_card_errors_differing_only_in_their_order_ref_are_one_group_of_44(
    client: Client, browser: Browser
) -> None:
    cards = [
        ("CardExpired", f"card for order ORD-{10_400 + n} expired on {1 + n % 12}/2026") for n in range(44)
    ]
    others = [
        ("KeyError", "'sku'"),
        ("KeyError", "'price'"),
        ("TimeoutError", "upstream took longer than 30 s"),
    ]
    await fail_jobs(client, cards + others)

    page = (await browser.get("/jobs?status=failed")).text
    found = groups(page)
    assert found[CARD][:2] == (44, 44)  # one group of 44 jobs, 44 distinct messages
    assert found[CARD][2] in {f"{kind}: {message}" for kind, message in cards}  # one real message
    assert found["KeyError: '<v>'"][:2] == (2, 2)
    assert found["TimeoutError: upstream took longer than <n> s"][:2] == (1, 1)
    assert list(found) == [CARD, "KeyError: '<v>'", "TimeoutError: upstream took longer than <n> s"]
    assert "all 47 failed jobs" in page

    narrowed = groups((await browser.get("/jobs?status=failed&error_type=KeyError")).text)
    assert list(narrowed) == ["KeyError: '<v>'"]
    pending = (await browser.get("/jobs?status=pending")).text
    assert "data-group=" not in pending  # groups are of failed jobs only


async def test_no_group_table_without_failed_jobs(browser: Browser) -> None:
    page = (await browser.get("/jobs?status=failed")).text
    assert "Errors, grouped" not in page


async def test_queue_stats_groups_failed_jobs_as_the_page_does(client: Client, browser: Browser) -> None:
    cards = [
        ("CardExpired", f"card for order ORD-{10_400 + n} expired on {1 + n % 12}/2026") for n in range(44)
    ]
    await fail_jobs(client, [*cards, ("KeyError", "'sku'"), ("KeyError", "'price'")])

    stats = await client.queue_stats(error_sample=1_000)
    found = {g.fingerprint: (g.jobs, g.messages, g.type_names) for g in stats.error_groups}
    assert found == {CARD: (44, 44, ("flaky",)), "KeyError: '<v>'": (2, 2, ("flaky",))}
    assert [g.fingerprint for g in stats.error_groups] == [CARD, "KeyError: '<v>'"]  # most jobs first
    assert stats.errors_read == 46
    page = groups((await browser.get("/jobs?status=failed")).text)
    assert {fingerprint: counts[:2] for fingerprint, counts in page.items()} == {
        fingerprint: counts[:2] for fingerprint, counts in found.items()
    }

    # The newest failed jobs only, as many as asked for; none unless asked (the gauges' sampler
    # reads queue_stats every few seconds and does not pay for them).
    capped = await client.queue_stats(error_sample=10)
    assert (capped.errors_read, sum(g.jobs for g in capped.error_groups)) == (10, 10)
    plain = await client.queue_stats()
    assert (plain.error_groups, plain.errors_read) == ((), 0)
    other = await client.queue_stats(type_names=["send_email"], error_sample=1_000)
    assert (other.error_groups, other.errors_read) == ((), 0)
