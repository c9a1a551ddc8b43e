"""``jobchain workers``: the worker registry — who is alive, draining or dead — and what each holds."""

from __future__ import annotations

from datetime import UTC, datetime

import click
from rich.table import Table
from rich.text import Text

from jobchain.cli.common import ago, json_option, open_client, run, state_option
from jobchain.cli.listing import iterate, names
from jobchain.cli.render import console, emit_json, short, table, worker_json
from jobchain.client import Client
from jobchain.entities import Job, Page, WorkerInfo, WorkerState

STATE_STYLES = {
    WorkerState.RUNNING: "green",
    WorkerState.DRAINING: "yellow",
    WorkerState.STOPPED: "dim",
    WorkerState.DEAD: "bold red",
}


async def read_workers(client: Client, states: list[str]) -> list[tuple[WorkerInfo, list[Job]]]:
    """The registry rows and, for each, the running jobs it holds (one paginated listing)."""
    workers = await client.list_workers(states=states)
    ids = [worker.id for worker in workers]
    held: dict[str, list[Job]] = {worker_id: [] for worker_id in ids}
    if ids:

        async def fetch(at: str | None, size: int) -> Page[Job]:
            return await client.list_jobs(
                statuses=["running"], leased_by=ids, order="asc", cursor=at, limit=size
            )

        async for job in iterate(fetch):
            if job.leased_by in held:
                held[job.leased_by].append(job)
    return [(worker, held[worker.id]) for worker in workers]


@click.command("workers")
@click.option(
    "--worker-state",
    "states",
    multiple=True,
    type=click.Choice([s.value for s in WorkerState], case_sensitive=False),
    help="Only workers in this state (repeatable).",
)
@click.option(
    "--jobs/--no-jobs", "show_jobs", default=True, show_default=True, help="List the jobs each worker holds."
)
@state_option
@json_option
def workers_command(states: tuple[str, ...], show_jobs: bool, state: str | None, as_json: bool) -> None:
    """List registered workers (state, since, last seen, host/pid, types, load) and what each holds.

    IN FLIGHT is the jobs a worker ran or buffered at its last heartbeat of the most it may
    (its slots' jobs plus prefetch); BUFFERED, how many of those waited for a slot; COMMITTING,
    attempts whose commit was being written; HOLDS, the running jobs leased to it now.
    """

    async def main() -> list[tuple[WorkerInfo, list[Job]]]:
        async with open_client(state) as client:
            return await read_workers(client, names(states))

    rows = run(main(), state=state)
    if as_json:
        emit_json({"items": [worker_json(worker, jobs) for worker, jobs in rows]})
        return
    out = console()
    out.print(workers_table(rows))
    if show_jobs:
        for worker, jobs in rows:
            if jobs:
                out.print(held_table(worker, jobs))


def workers_table(rows: list[tuple[WorkerInfo, list[Job]]]) -> Table:
    """One row per worker."""
    now = datetime.now(UTC)
    out = table(
        "WORKER",
        "NAME",
        "STATE",
        "STARTED",
        "LAST SEEN",
        "HOST/PID",
        "TYPES",
        "SLOTS",
        "IN FLIGHT",
        "BUFFERED",
        "COMMITTING",
        "HOLDS",
    )
    for worker, jobs in rows:
        out.add_row(
            worker.id,
            worker.name,
            Text(worker.state.value, style=STATE_STYLES[worker.state]),
            ago(worker.started_at, now),
            ago(worker.last_seen_at, now),
            f"{worker.host}/{worker.pid}",
            ", ".join(worker.type_names),
            str(worker.concurrency),
            *load_cells(worker),
            str(len(jobs)),
        )
    if not rows:
        out.caption = "no registered workers"
    return out


def load_cells(worker: WorkerInfo) -> tuple[str, str, str]:
    """IN FLIGHT (``inflight/capacity``), BUFFERED and COMMITTING of one worker; ``-`` for a
    dead or stopped one, which holds nothing of its own now (the database may still lease it
    jobs: HOLDS)."""
    if worker.state not in (WorkerState.RUNNING, WorkerState.DRAINING):
        return "-", "-", "-"
    # capacity 0: a worker older than the field, which did not report it.
    inflight = f"{worker.inflight}/{worker.capacity}" if worker.capacity else str(worker.inflight)
    return inflight, str(worker.buffered), str(worker.committing)


def held_table(worker: WorkerInfo, jobs: list[Job]) -> Table:
    """The running jobs one worker holds."""
    now = datetime.now(UTC)
    out = table(
        "JOB",
        "TYPE",
        "CHAIN",
        "ATTEMPT",
        "STARTED",
        "LEASED UNTIL",
        title=f"held by {worker.name} ({worker.id})",
    )
    for job in jobs:
        started = job.attempt_started_at
        out.add_row(
            job.id,
            job.type_name,
            "(root)" if job.is_root else job.chain_id,
            str(job.attempt),
            ago(started, now) if started is not None else "-",
            short(job.leased_until),
        )
    return out
