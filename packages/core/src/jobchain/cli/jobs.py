"""``jobchain jobs list|show``: find jobs by filters and look at one in full."""

from __future__ import annotations

import json
from typing import Any

import click
from rich.console import Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from jobchain.cli.common import (
    CHAIN_ID,
    JOB_ID,
    StatusType,
    fail,
    json_option,
    open_client,
    run,
    state_option,
)
from jobchain.cli.listing import (
    Paging,
    Window,
    names,
    page_hint,
    paging_options,
    read_pages,
    window_options,
)
from jobchain.cli.render import (
    PlainTable,
    chain_json,
    console,
    emit_json,
    job_json,
    last_error,
    short,
    status_text,
    table,
    when,
)
from jobchain.entities import Chain, Job, Page


@click.group("jobs")
def jobs_group() -> None:
    """List jobs and show one in full."""


@jobs_group.command("list")
@state_option
@click.option("--type", "types", multiple=True, metavar="NAME", help="Job type (repeatable).")
@click.option("--chain-type", "chain_types", multiple=True, metavar="NAME", help="Chain type (repeatable).")
@click.option("--chain", "chains", multiple=True, type=CHAIN_ID, metavar="ID", help="Chain id (repeatable).")
@click.option("--status", "statuses", multiple=True, type=StatusType(), help="Status (repeatable).")
@click.option("--error-type", "error_types", multiple=True, metavar="NAME", help="Type of the last error.")
@click.option(
    "--leased-by", "leased_by", multiple=True, metavar="WORKER_ID", help="Running jobs of a worker."
)
@window_options
@paging_options
@json_option
def jobs_list_command(
    state: str | None,
    types: tuple[str, ...],
    chain_types: tuple[str, ...],
    chains: tuple[str, ...],
    statuses: tuple[str, ...],
    error_types: tuple[str, ...],
    leased_by: tuple[str, ...],
    newer_than: Any,
    older_than: Any,
    limit: int,
    cursor: str | None,
    order: str,
    all_pages: bool,
    as_json: bool,
) -> None:
    """List jobs, newest first, with filters; --json for scripts."""
    paging = Paging(limit=limit, cursor=cursor, order=order, all_pages=all_pages)
    created_from, created_to = Window(newer_than=newer_than, older_than=older_than).bounds()

    async def main() -> Page[Job]:
        async with open_client(state) as client:

            async def fetch(at: str | None, size: int) -> Page[Job]:
                return await client.list_jobs(
                    type_names=names(types),
                    chain_type_names=names(chain_types),
                    chain_ids=names(chains),
                    statuses=names(statuses),
                    error_types=names(error_types),
                    leased_by=names(leased_by),
                    created_from=created_from,
                    created_to=created_to,
                    order=paging.direction,
                    cursor=at,
                    limit=size,
                )

            return await read_pages(fetch, paging)

    page = run(main(), state=state)
    if as_json:
        emit_json({"items": [job_json(j) for j in page.items], "next_cursor": page.next_cursor})
        return
    console().print(jobs_table(page.items))
    page_hint(page, "jobchain jobs list")


def jobs_table(jobs: list[Job]) -> Table:
    """Jobs as a table: id, type, (chain, when some job is not its chain's root), index, status,
    attempts, when due or finished, last error (creation times: ``jobs show`` or --json)."""
    with_chain = any(not job.is_root for job in jobs)
    headers = ["ID", "TYPE", *(["CHAIN"] if with_chain else []), "#", "STATUS", "ATTEMPT"]
    out = table(*headers, "DUE/FINISHED", "LAST ERROR")
    for job in jobs:
        moment = job.finished_at or (job.scheduled_at if not job.status.terminal else None)
        chain = ["(root)" if job.is_root else job.chain_id] if with_chain else []
        out.add_row(
            job.id,
            job.type_name,
            *chain,
            str(job.chain_index),
            status_text(job.status),
            str(job.attempt),
            short(moment),
            Text(last_error(job)),
        )
    if not jobs:
        out.caption = "no jobs match"
    return out


@jobs_group.command("show")
@click.argument("job_id", type=JOB_ID)
@state_option
@json_option
def jobs_show_command(job_id: str, state: str | None, as_json: bool) -> None:
    """Show one job: fields, input, output, blockers and error history."""

    async def main() -> tuple[Job, list[Chain]] | None:
        async with open_client(state) as client:
            job = await client.get_job(job_id)
            if job is None:
                return None
            return job, await client.get_job_blockers(job_id)

    found = run(main(), state=state)
    if found is None:
        fail(f"job {job_id} not found")
        return
    job, blockers = found
    if as_json:
        emit_json({"job": job_json(job), "blockers": [chain_json(c) for c in blockers]})
        return
    console().print(job_panel(job, blockers))


def job_panel(job: Job, blockers: list[Chain]) -> Panel:
    """One job in full, for people."""
    fields = PlainTable.grid(padding=(0, 2))
    fields.add_column(style="bold")
    fields.add_column(overflow="fold")
    rows: list[tuple[str, Any]] = [
        ("id", job.id),
        ("type", job.type_name),
        ("chain", f"{job.chain_id} ({job.chain_type_name}, job #{job.chain_index})"),
        ("status", status_text(job.status)),
        ("attempt", f"{job.attempt} ({job.attempts_used} since the last retry)"),
        ("created", when(job.created_at)),
        ("scheduled", when(job.scheduled_at)),
        ("first attempt", when(job.first_attempt_at)),
        ("last attempt", when(job.attempt_started_at)),
    ]
    if job.leased_by is not None:
        rows.append(("leased by", f"{job.leased_by} until {when(job.leased_until)}"))
    for label, moment in (
        ("completed", job.completed_at),
        ("failed", job.failed_at),
        ("cancelled", job.cancelled_at),
    ):
        if moment is not None:
            rows.append((label, when(moment)))
    if job.cancel_reason:
        rows.append(("cancel reason", Text(job.cancel_reason)))
    if job.failed_by_chain_id:
        rows.append(("failed by chain", job.failed_by_chain_id))
    if job.rescued_at is not None:
        rows.append(("rescued", f"{when(job.rescued_at)} from {job.rescued_from} ({job.rescue_reason})"))
    if job.deduplication_key:
        rows.append(("deduplication key", Text(job.deduplication_key)))
    if job.priority:
        rows.append(("priority", str(job.priority)))
    if job.ordering_key is not None:
        rows.append(("ordering key", Text(job.ordering_key)))
    rows.append(("input", Text(json.dumps(job.input, ensure_ascii=False))))
    if job.output is not None:
        rows.append(("output", Text(json.dumps(job.output, ensure_ascii=False))))
    for label, value in rows:
        fields.add_row(label, value)
    parts: list[Any] = [fields]
    if blockers:
        listed = table("BLOCKER CHAIN", "TYPE", "STATUS", "FINISHED")
        for chain in blockers:
            listed.add_row(chain.id, chain.type_name, status_text(chain.status), when(chain.finished_at))
        parts.append(listed)
    for error in job.attempt_errors:
        head = Text(
            f"attempt {error.attempt} at {when(error.at)} ({error.worker_id or 'no worker'}): ", style="red"
        )
        head.append(f"{error.error_type}: {error.message}", style="bold")
        parts.append(head)
        if error.traceback:
            parts.append(Text(error.traceback.rstrip(), style="dim"))
    return Panel(Group(*parts), title=Text(f"job {job.id}"), expand=False)
