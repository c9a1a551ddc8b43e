"""``jobchain delete``: delete chains with all their jobs, by id or every chain matching a filter."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import click

from jobchain.cli.bulk import (
    batch_option,
    confirm,
    in_batches,
    matching_chain_ids,
    plural,
    require_one_selection,
)
from jobchain.cli.common import (
    CHAIN_ID,
    StatusType,
    json_option,
    notify_option,
    open_client,
    run,
    state_option,
    yes_option,
)
from jobchain.cli.listing import Window, names, window_options
from jobchain.cli.render import emit_json
from jobchain.client import Client
from jobchain.errors import BlockerReferenceError, ChainNotFoundError, JobchainError

FILTERS = "--type, --status, --newer-than, --older-than"


class StillBlocksError(JobchainError):
    """A chain to delete still blocks a job outside the selection; delete that job's chain with it."""


@dataclass(slots=True)
class Deleted:
    """Chains deleted (blockers deleted by --cascade included), and chains left because they block others."""

    deleted: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)


@click.command("delete")
@click.argument("chain_ids", nargs=-1, type=CHAIN_ID, metavar="[CHAIN_ID]...")
@click.option("--type", "types", multiple=True, metavar="NAME", help="Bulk: chain type (repeatable).")
@click.option(
    "--status", "statuses", multiple=True, type=StatusType(), help="Bulk: status of the chain's last job."
)
@window_options
@click.option(
    "--cascade", is_flag=True, help="Also delete, recursively, the chains that block the deleted ones."
)
@batch_option
@yes_option
@state_option
@notify_option
@json_option
def delete_command(
    chain_ids: tuple[str, ...],
    types: tuple[str, ...],
    statuses: tuple[str, ...],
    newer_than: Any,
    older_than: Any,
    cascade: bool,
    batch_size: int,
    yes: bool,
    state: str | None,
    notify: str | None,
    as_json: bool,
) -> None:
    """Delete chains and all their jobs: by CHAIN_ID (all or nothing) or every chain matching a filter.

    Asks first (--yes skips it). A chain that still blocks a job of another chain is
    refused (by id: nothing is deleted; in bulk: it is left in place and reported). Workers running a deleted
    job are told to stop.
    """
    window = Window(newer_than=newer_than, older_than=older_than)
    bulk = bool(types or statuses or window.given)
    require_one_selection(bool(chain_ids), bulk, FILTERS)
    created_from, created_to = window.bounds()

    async def main() -> Deleted:
        async with open_client(state, notify) as client:
            if not bulk:
                return await delete_ids(client, list(dict.fromkeys(chain_ids)), cascade, yes)

            ids = await matching_chain_ids(
                client,
                type_names=names(types),
                statuses=names(statuses),
                created_from=created_from,
                created_to=created_to,
            )
            if not ids:
                return Deleted()
            confirm(f"Delete {plural(len(ids), 'chain')} with all their jobs?", yes)
            return await delete_many(client, ids, cascade, batch_size)

    done = run(main(), state=state)
    if as_json:
        emit_json({"deleted": done.deleted, "skipped": done.skipped})
        return
    if not bulk:
        for chain_id in done.deleted:
            click.echo(f"deleted {chain_id}")
    click.echo(f"deleted {plural(len(done.deleted), 'chain')}")
    if done.skipped:
        click.echo(
            f"skipped {plural(len(done.skipped), 'chain')} that block jobs outside the selection"
            " (select their dependent chains too)",
            err=True,
        )


def _refusal(error: BlockerReferenceError) -> StillBlocksError:
    listed = ", ".join(f"chain {r.chain_id} blocks job {r.referenced_by_job_id}" for r in error.references)
    return StillBlocksError(f"nothing deleted: {listed}; delete the chains of those jobs in the same command")


async def delete_ids(client: Client, ids: list[str], cascade: bool, yes: bool) -> Deleted:
    """Check every id exists (else error, nothing asked), confirm, delete together."""
    found = {chain.id: chain for chain in (await client.list_chains(chain_ids=ids, limit=len(ids))).items}
    for chain_id in ids:
        if chain_id not in found:
            raise ChainNotFoundError(chain_id)
    listed = ", ".join(
        f"{chain_id} ({found[chain_id].type_name}, {found[chain_id].status})" for chain_id in ids[:5]
    )
    more = f" and {len(ids) - 5} more" if len(ids) > 5 else ""
    confirm(f"Delete {plural(len(ids), 'chain')} with all their jobs: {listed}{more}?", yes)
    try:
        async with client.transaction() as tx:
            chains = await client.delete_chains(tx, ids, cascade=cascade)
    except BlockerReferenceError as error:
        raise _refusal(error) from None
    return Deleted(deleted=[chain.id for chain in chains])


async def delete_many(client: Client, ids: list[str], cascade: bool, batch_size: int) -> Deleted:
    """Delete ``ids`` a batch per transaction; chains that block jobs elsewhere are left and reported.

    A chain refused because it blocks a job of a later batch is tried again once that batch
    is gone, until a pass deletes nothing more.
    """
    done = Deleted()
    gone: set[str] = set()
    refused: list[str] = []

    async def batch(part: list[str]) -> int:
        part = [i for i in part if i not in gone]  # a cascade may have taken them already
        while part:
            try:
                async with client.transaction() as tx:
                    chains = await client.delete_chains(tx, part, cascade=cascade)
            except BlockerReferenceError as error:
                blocking = {r.chain_id for r in error.references}
                left = [i for i in part if i not in blocking]
                refused.extend(i for i in part if i in blocking)
                if len(left) == len(part):  # the refusal names none of ours: leave the whole batch
                    refused.extend(part)
                    return 0
                part = left
                continue
            deleted = [chain.id for chain in chains]
            gone.update(deleted)
            done.deleted += deleted
            return len(deleted)
        return 0

    await in_batches(ids, batch_size, "deleting", batch)
    while refused:
        again, refused[:] = list(dict.fromkeys(refused)), []
        before = len(done.deleted)
        for start in range(0, len(again), batch_size):
            await batch(again[start : start + batch_size])
        if len(done.deleted) == before:
            refused[:] = again
            break
    done.skipped = [i for i in dict.fromkeys(refused) if i not in gone]
    return done
