"""``jobchain cancel``: cancel chains by id, or every chain matching a filter."""

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
from jobchain.entities import JobStatus
from jobchain.errors import ChainNotCancellableError, ChainNotFoundError

CANCELLABLE = (JobStatus.BLOCKED, JobStatus.PENDING, JobStatus.RUNNING)
FILTERS = "--type, --status, --newer-than, --older-than"


@dataclass(slots=True)
class Cancelled:
    """Chains cancelled, and (bulk) chains that finished or vanished before their batch ran."""

    cancelled: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)


@click.command("cancel")
@click.argument("chain_ids", nargs=-1, type=CHAIN_ID, metavar="[CHAIN_ID]...")
@click.option("--type", "types", multiple=True, metavar="NAME", help="Bulk: chain type (repeatable).")
@click.option(
    "--status",
    "statuses",
    multiple=True,
    type=StatusType(CANCELLABLE),
    help="Bulk: status of the chain's last job (repeatable; default blocked, pending and running).",
)
@window_options
@click.option("--reason", default=None, help="Recorded on each cancelled job (cancel_reason).")
@batch_option
@yes_option
@state_option
@notify_option
@json_option
def cancel_command(
    chain_ids: tuple[str, ...],
    types: tuple[str, ...],
    statuses: tuple[str, ...],
    newer_than: Any,
    older_than: Any,
    reason: str | None,
    batch_size: int,
    yes: bool,
    state: str | None,
    notify: str | None,
    as_json: bool,
) -> None:
    """Cancel chains: by CHAIN_ID (all or nothing) or every unfinished chain matching a filter.

    Asks first (--yes skips it). A running job's worker is told to stop at once when a
    notify backend is configured (--notify), else at its next lease renewal.
    """
    window = Window(newer_than=newer_than, older_than=older_than)
    bulk = bool(types or statuses or window.given)
    require_one_selection(bool(chain_ids), bulk, FILTERS)
    created_from, created_to = window.bounds()
    wanted = names(statuses) or [s.value for s in CANCELLABLE]

    async def main() -> Cancelled:
        async with open_client(state, notify) as client:
            if not bulk:
                return await cancel_ids(client, list(dict.fromkeys(chain_ids)), reason, yes)

            ids = await matching_chain_ids(
                client,
                type_names=names(types),
                statuses=wanted,
                created_from=created_from,
                created_to=created_to,
            )
            if not ids:
                return Cancelled()
            confirm(f"Cancel {plural(len(ids), 'chain')}?", yes)
            return await cancel_many(client, ids, reason, batch_size)

    done = run(main(), state=state)
    if as_json:
        emit_json({"cancelled": done.cancelled, "skipped": done.skipped})
        return
    if not bulk:
        for chain_id in done.cancelled:
            click.echo(f"cancelled {chain_id}")
    click.echo(f"cancelled {plural(len(done.cancelled), 'chain')}")
    if done.skipped:
        click.echo(
            f"skipped {plural(len(done.skipped), 'chain')} that finished or were deleted meanwhile", err=True
        )


async def cancel_ids(client: Client, ids: list[str], reason: str | None, yes: bool) -> Cancelled:
    """Check every id first (unknown or finished: error, nothing asked), confirm, cancel together."""
    found = {chain.id: chain for chain in (await client.list_chains(chain_ids=ids, limit=len(ids))).items}
    for chain_id in ids:
        chain = found.get(chain_id)
        if chain is None:
            raise ChainNotFoundError(chain_id)
        if chain.status not in CANCELLABLE:
            raise ChainNotCancellableError(chain_id, chain.status.value)
    listed = ", ".join(f"{chain_id} ({found[chain_id].type_name})" for chain_id in ids[:5])
    more = f" and {len(ids) - 5} more" if len(ids) > 5 else ""
    confirm(f"Cancel {plural(len(ids), 'chain')}: {listed}{more}?", yes)
    async with client.transaction() as tx:
        chains = await client.cancel_chains(tx, ids, reason=reason)
    return Cancelled(cancelled=[chain.id for chain in chains])


async def cancel_many(client: Client, ids: list[str], reason: str | None, batch_size: int) -> Cancelled:
    """Cancel ``ids`` a batch per transaction; a chain that finished meanwhile is skipped."""
    done = Cancelled()

    async def batch(part: list[str]) -> int:
        while part:
            try:
                async with client.transaction() as tx:
                    chains = await client.cancel_chains(tx, part, reason=reason)
            except (ChainNotFoundError, ChainNotCancellableError) as refused:
                # All or nothing: drop the refused chain and cancel the rest of the batch.
                done.skipped.append(refused.chain_id)
                part = [i for i in part if i != refused.chain_id]
                continue
            done.cancelled += [chain.id for chain in chains]
            return len(chains)
        return 0

    await in_batches(ids, batch_size, "cancelling", batch)
    return done
