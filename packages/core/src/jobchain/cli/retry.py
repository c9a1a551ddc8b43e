"""``jobchain retry``: redrive failed or cancelled jobs, by id, by chain, or in bulk by filter."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import click

from jobchain.cli.bulk import batch_option, confirm, plural, progress_bar, require_one_selection
from jobchain.cli.common import (
    CHAIN_ID,
    JOB_ID,
    StatusType,
    json_option,
    notify_option,
    open_client,
    run,
    state_option,
    yes_option,
)
from jobchain.cli.listing import Window, iterate, names, window_options
from jobchain.cli.render import emit_json
from jobchain.client import Client
from jobchain.client_lifecycle import RETRYABLE_STATUSES
from jobchain.entities import Job, Page
from jobchain.errors import ChainNotFoundError

FILTERS = "--status, --type, --chain-type, --error-type, --newer-than, --older-than"


@dataclass(slots=True)
class Retried:
    """Ids of the retried jobs and of the dependents that went back to blocked with them."""

    retried: list[str] = field(default_factory=list)
    reblocked: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True, kw_only=True)
class RetryFilter:
    """The bulk selection: failed and/or cancelled jobs by type, chain type, error type, age."""

    statuses: list[str]
    types: list[str]
    chain_types: list[str]
    error_types: list[str]
    created_from: datetime | None
    created_to: datetime | None

    def listing(self) -> dict[str, Any]:
        return {
            "type_names": self.types,
            "chain_type_names": self.chain_types,
            "statuses": self.statuses,
            "error_types": self.error_types,
            "created_from": self.created_from,
            "created_to": self.created_to,
        }


@click.command("retry")
@click.argument("job_ids", nargs=-1, type=JOB_ID, metavar="[JOB_ID]...")
@click.option(
    "--chain", "chain_ids", multiple=True, type=CHAIN_ID, metavar="ID", help="Retry this chain's last job."
)
@click.option(
    "--status",
    "statuses",
    multiple=True,
    type=StatusType(RETRYABLE_STATUSES),
    help="Bulk: jobs in this status (repeatable; default failed and cancelled).",
)
@click.option("--type", "types", multiple=True, metavar="NAME", help="Bulk: job type (repeatable).")
@click.option("--chain-type", "chain_types", multiple=True, metavar="NAME", help="Bulk: chain type.")
@click.option(
    "--error-type", "error_types", multiple=True, metavar="NAME", help="Bulk: type of the last error."
)
@window_options
@batch_option
@yes_option
@state_option
@notify_option
@json_option
def retry_command(
    job_ids: tuple[str, ...],
    chain_ids: tuple[str, ...],
    statuses: tuple[str, ...],
    types: tuple[str, ...],
    chain_types: tuple[str, ...],
    error_types: tuple[str, ...],
    newer_than: Any,
    older_than: Any,
    batch_size: int,
    yes: bool,
    state: str | None,
    notify: str | None,
    as_json: bool,
) -> None:
    """Redrive failed or cancelled jobs: by JOB_ID, by --chain, or every job matching a filter.

    Ids are retried together, all or nothing. A filter retries in batches after a
    confirmation (--yes skips it); jobs that failed because a blocker chain failed come back
    with that chain's retry.
    """
    window = Window(newer_than=newer_than, older_than=older_than)
    bulk = bool(statuses or types or chain_types or error_types or window.given)
    require_one_selection(bool(job_ids or chain_ids), bulk, FILTERS)
    created_from, created_to = window.bounds()
    selection = RetryFilter(
        statuses=names(statuses) or [s.value for s in RETRYABLE_STATUSES],
        types=names(types),
        chain_types=names(chain_types),
        error_types=names(error_types),
        created_from=created_from,
        created_to=created_to,
    )

    async def main() -> Retried:
        async with open_client(state, notify) as client:
            if bulk:
                return await retry_matching(client, selection, batch_size, yes)
            return await retry_ids(client, list(job_ids), list(chain_ids))

    done = run(main(), state=state)
    if as_json:
        emit_json({"retried": done.retried, "reblocked": done.reblocked})
        return
    if not bulk:
        for job_id in done.retried:
            click.echo(f"retried {job_id}")
    click.echo(
        f"retried {plural(len(done.retried), 'job')}"
        + (
            f"; {plural(len(done.reblocked), 'dependent job')} blocked again until they run"
            if done.reblocked
            else ""
        )
    )


async def retry_ids(client: Client, job_ids: list[str], chain_ids: list[str]) -> Retried:
    """Retry the jobs and the chains' last jobs in one transaction (all or nothing)."""
    for chain_id in chain_ids:
        chain = await client.get_chain(chain_id)
        if chain is None:
            raise ChainNotFoundError(chain_id)
        job_ids.append(chain.last.id)
    async with client.transaction() as tx:
        jobs = await client.retry_jobs(tx, job_ids)
    return Retried(retried=[job.id for job in jobs])


async def retry_matching(client: Client, selection: RetryFilter, batch_size: int, yes: bool) -> Retried:
    """Count the matching jobs, confirm, then retry them oldest first, a batch per transaction."""

    async def fetch(at: str | None, size: int) -> Page[Job]:
        return await client.list_jobs(**selection.listing(), order="asc", cursor=at, limit=size)

    # A job failed by its blocker chain is retried through that chain, not on its own.
    count = sum([1 async for job in iterate(fetch) if job.failed_by_chain_id is None])
    done = Retried()
    if count == 0:
        return done
    confirm(f"Retry {plural(count, 'job')} ({'/'.join(selection.statuses)})?", yes)
    with progress_bar() as progress:
        task = progress.add_task("retrying", total=count)
        while True:
            async with client.transaction() as tx:
                result = await client.retry_chains(
                    tx,
                    type_names=selection.types,
                    chain_type_names=selection.chain_types,
                    statuses=selection.statuses,
                    error_types=selection.error_types,
                    created_from=selection.created_from,
                    created_to=selection.created_to,
                    limit=batch_size,
                )
            done.retried += [job.id for job in result.retried]
            done.reblocked += [job.id for job in result.reblocked]
            progress.advance(task, len(result.retried))
            if not result.has_more or not result.retried:
                return done
