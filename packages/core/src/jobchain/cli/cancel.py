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
    """Chains cancelled, and (bulk) chains that finished or vanished before their batch ran;
    with --cascade the chains it added and the ones left out because shared (id, type)."""

    cancelled: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    cascaded: list[tuple[str, str]] = field(default_factory=list)
    shared: list[str] = field(default_factory=list)


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
@click.option(
    "--cascade",
    is_flag=True,
    help="By id: also cancel the chains these wait for (their blockers), recursively, "
    "except ones other unfinished chains wait for too.",
)
@click.option(
    "--include-shared",
    is_flag=True,
    help="With --cascade: cancel the blockers other chains wait for too (those then fail).",
)
@click.option("--dry-run", is_flag=True, help="By id: print what would be cancelled; change nothing.")
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
    cascade: bool,
    include_shared: bool,
    dry_run: bool,
    batch_size: int,
    yes: bool,
    state: str | None,
    notify: str | None,
    as_json: bool,
) -> None:
    """Cancel chains: by CHAIN_ID (all or nothing) or every unfinished chain matching a filter.

    Asks first (--yes skips it). A running job's worker is told to stop at once when a
    notify backend is configured (--notify), else at its next lease renewal.

    --cascade also cancels, recursively, the unfinished chains the named ones wait for; a
    chain that another unfinished chain waits for too is left out (and named), with what only
    it waits for, unless --include-shared. --dry-run prints what would happen.
    """
    window = Window(newer_than=newer_than, older_than=older_than)
    bulk = bool(types or statuses or window.given)
    require_one_selection(bool(chain_ids), bulk, FILTERS)
    if bulk and (cascade or dry_run):
        raise click.UsageError("--cascade and --dry-run take chain ids, not filters")
    if include_shared and not cascade:
        raise click.UsageError("--include-shared goes with --cascade")
    options = CancelOptions(reason=reason, cascade=cascade, include_shared=include_shared, dry_run=dry_run)
    created_from, created_to = window.bounds()
    wanted = names(statuses) or [s.value for s in CANCELLABLE]

    async def main() -> Cancelled:
        async with open_client(state, notify) as client:
            if not bulk:
                return await cancel_ids(client, list(dict.fromkeys(chain_ids)), options, yes)

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
        document: dict[str, Any] = {"cancelled": done.cancelled, "skipped": done.skipped}
        if cascade or dry_run:
            document.update(
                cascaded=[chain_id for chain_id, _ in done.cascaded], shared=done.shared, dry_run=dry_run
            )
        emit_json(document)
        return
    verb = "would cancel" if dry_run else "cancelled"
    if not bulk:
        for chain_id in done.cancelled:
            click.echo(f"{verb} {chain_id}")
        for chain_id, type_name in done.cascaded:
            click.echo(f"{verb} {chain_id} ({type_name}, waited for)")
        for chain_id in done.shared:
            click.echo(f"left out {chain_id} (other chains wait for it too; --include-shared takes it)")
    click.echo(f"{verb} {plural(len(done.cancelled) + len(done.cascaded), 'chain')}")
    if done.skipped:
        click.echo(
            f"skipped {plural(len(done.skipped), 'chain')} that finished or were deleted meanwhile", err=True
        )


@dataclass(frozen=True, slots=True)
class CancelOptions:
    reason: str | None = None
    cascade: bool = False
    include_shared: bool = False
    dry_run: bool = False


async def cancel_ids(client: Client, ids: list[str], options: CancelOptions, yes: bool) -> Cancelled:
    """Check every id first (unknown or finished: error, nothing asked), confirm, cancel together.

    A dry run asks nothing; a cascade asks after a dry run says what it would take."""
    found = {chain.id: chain for chain in (await client.list_chains(chain_ids=ids, limit=len(ids))).items}
    for chain_id in ids:
        chain = found.get(chain_id)
        if chain is None:
            raise ChainNotFoundError(chain_id)
        if chain.status not in CANCELLABLE:
            raise ChainNotCancellableError(chain_id, chain.status.value)
    if options.dry_run:
        return await _cascading(client, ids, options, dry_run=True)
    listed = ", ".join(f"{chain_id} ({found[chain_id].type_name})" for chain_id in ids[:5])
    more = f" and {len(ids) - 5} more" if len(ids) > 5 else ""
    waited = ""
    if options.cascade and not yes:
        plan = await _cascading(client, ids, options, dry_run=True)
        waited = f" and {plural(len(plan.cascaded), 'chain')} they wait for"
        if plan.shared:
            waited += f" (leaving out {plural(len(plan.shared), 'shared chain')})"
    confirm(f"Cancel {plural(len(ids), 'chain')}: {listed}{more}{waited}?", yes)
    if options.cascade:
        return await _cascading(client, ids, options, dry_run=False)
    async with client.transaction() as tx:
        chains = await client.cancel_chains(tx, ids, reason=options.reason)
    return Cancelled(cancelled=[chain.id for chain in chains])


async def _cascading(client: Client, ids: list[str], options: CancelOptions, *, dry_run: bool) -> Cancelled:
    async with client.transaction() as tx:
        if options.cascade:
            report = await client.cancel_chains_cascading(
                tx, ids, reason=options.reason, include_shared=options.include_shared, dry_run=dry_run
            )
            return Cancelled(
                cancelled=[job.chain_id for job in report.cancelled],
                cascaded=[(job.chain_id, job.chain_type_name) for job in report.cascaded],
                shared=report.shared,
            )
        chains = await client.cancel_chains(tx, ids, reason=options.reason, dry_run=dry_run)
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
