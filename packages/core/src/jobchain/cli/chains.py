"""``jobchain chains list|show``: find chains, and draw one as a tree of its jobs and blockers."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import click
from rich.table import Table
from rich.text import Text
from rich.tree import Tree

from jobchain.cli.common import CHAIN_ID, StatusType, fail, json_option, open_client, run, state_option
from jobchain.cli.listing import (
    Paging,
    Window,
    iterate,
    names,
    page_hint,
    paging_options,
    read_pages,
    window_options,
)
from jobchain.cli.render import chain_json, console, emit_json, job_json, short, status_text, table, when
from jobchain.client import Client
from jobchain.entities import Chain, Job, Page


@click.group("chains")
def chains_group() -> None:
    """List chains and draw one as a tree."""


@chains_group.command("list")
@state_option
@click.option("--type", "types", multiple=True, metavar="NAME", help="Chain type (repeatable).")
@click.option(
    "--status", "statuses", multiple=True, type=StatusType(), help="Status of the last job (repeatable)."
)
@click.option("--root-only", is_flag=True, help="Leave out chains used as a blocker.")
@window_options
@paging_options
@json_option
def chains_list_command(
    state: str | None,
    types: tuple[str, ...],
    statuses: tuple[str, ...],
    root_only: bool,
    newer_than: Any,
    older_than: Any,
    limit: int,
    cursor: str | None,
    order: str,
    all_pages: bool,
    as_json: bool,
) -> None:
    """List chains, newest first, with filters; --json for scripts."""
    paging = Paging(limit=limit, cursor=cursor, order=order, all_pages=all_pages)
    created_from, created_to = Window(newer_than=newer_than, older_than=older_than).bounds()

    async def main() -> Page[Chain]:
        async with open_client(state) as client:

            async def fetch(at: str | None, size: int) -> Page[Chain]:
                return await client.list_chains(
                    type_names=names(types),
                    statuses=names(statuses),
                    root_only=root_only,
                    created_from=created_from,
                    created_to=created_to,
                    order=paging.direction,
                    cursor=at,
                    limit=size,
                )

            return await read_pages(fetch, paging)

    page = run(main(), state=state)
    if as_json:
        emit_json({"items": [chain_json(c) for c in page.items], "next_cursor": page.next_cursor})
        return
    console().print(chains_table(page.items))
    page_hint(page, "jobchain chains list")


def chains_table(chains: list[Chain]) -> Table:
    """Chains as a table: id, type, status, jobs so far, last job's type, times."""
    out = table("ID", "TYPE", "STATUS", "JOBS", "LAST JOB", "CREATED", "FINISHED")
    for chain in chains:
        out.add_row(
            chain.id,
            chain.type_name,
            status_text(chain.status),
            str(chain.last.chain_index + 1),
            chain.last.type_name,
            short(chain.created_at),
            short(chain.finished_at),
        )
    if not chains:
        out.caption = "no chains match"
    return out


@dataclass(slots=True)
class ChainView:
    """Everything ``chains show`` draws: the chain, its jobs in order, each job's blockers,
    and the jobs elsewhere that wait on this chain."""

    chain: Chain
    jobs: list[Job] = field(default_factory=list)
    blockers: dict[str, list[Chain]] = field(default_factory=dict)
    blocking: list[Job] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """``{"chain", "jobs", "blockers": {job_id: [chain]}, "blocking": [job]}``."""
        return {
            "chain": chain_json(self.chain),
            "jobs": [job_json(j) for j in self.jobs],
            "blockers": {job_id: [chain_json(c) for c in chains] for job_id, chains in self.blockers.items()},
            "blocking": [job_json(j) for j in self.blocking],
        }


async def read_chain(client: Client, chain_id: str) -> ChainView | None:
    """The chain's view, or None when it does not exist."""
    chain = await client.get_chain(chain_id)
    if chain is None:
        return None
    view = ChainView(chain=chain)

    async def chain_jobs(at: str | None, size: int) -> Page[Job]:
        return await client.list_chain_jobs(chain_id, cursor=at, limit=size)

    async def blocked(at: str | None, size: int) -> Page[Job]:
        return await client.list_blocked_jobs(chain_id, cursor=at, limit=size)

    view.jobs = [job async for job in iterate(chain_jobs)]
    for job in view.jobs:
        blockers = await client.get_job_blockers(job.id)
        if blockers:
            view.blockers[job.id] = blockers
    view.blocking = [job async for job in iterate(blocked)]
    return view


@chains_group.command("show")
@click.argument("chain_id", type=CHAIN_ID)
@state_option
@json_option
def chains_show_command(chain_id: str, state: str | None, as_json: bool) -> None:
    """Draw a chain as a tree: its jobs in order, their blockers and statuses, errors."""

    async def main() -> ChainView | None:
        async with open_client(state) as client:
            return await read_chain(client, chain_id)

    view = run(main(), state=state)
    if view is None:
        fail(f"chain {chain_id} not found")
        return
    if as_json:
        emit_json(view.to_json())
        return
    console().print(chain_tree(view))


def _label(*parts: str | Text) -> Text:
    text = Text()
    for part in parts:
        if text:
            text.append("  ")
        text.append(part)
    return text


def chain_tree(view: ChainView) -> Tree:
    """The chain as a rich tree (user data is shown as text, never as markup)."""
    chain = view.chain
    tree = Tree(
        _label(Text(f"chain {chain.id}", style="bold"), chain.type_name, status_text(chain.status)),
        guide_style="dim",
    )
    for job in view.jobs:
        node = tree.add(
            _label(
                f"#{job.chain_index} {job.type_name}",
                job.id,
                status_text(job.status),
                f"attempt {job.attempt}",
                when(job.finished_at or job.scheduled_at),
            )
        )
        for blocker in view.blockers.get(job.id, []):
            node.add(
                _label(
                    Text("blocked by", style="dim"),
                    f"chain {blocker.id}",
                    blocker.type_name,
                    status_text(blocker.status),
                )
            )
        if job.failed_by_chain_id:
            node.add(Text(f"failed because chain {job.failed_by_chain_id} did not complete", style="red"))
        if job.cancel_reason:
            node.add(Text(f"cancelled: {job.cancel_reason}", style="dim"))
        for error in job.attempt_errors[-3:]:
            node.add(
                Text(
                    f"attempt {error.attempt}: {error.error_type}: {' '.join(error.message.split())}",
                    style="red",
                )
            )
    if view.blocking:
        waiting = tree.add(Text("blocking", style="bold"))
        for job in view.blocking:
            waiting.add(
                _label(f"job {job.id}", job.type_name, f"chain {job.chain_id}", status_text(job.status))
            )
    return tree
