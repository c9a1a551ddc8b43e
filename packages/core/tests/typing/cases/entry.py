"""start_chain with a type that is not an entry point is a mypy error, on every way to start."""

from __future__ import annotations

from shop import Order, pack, place_order, quote

from jobchain import ChainStart, Client, Transaction
from jobchain.sync import SyncClient, SyncTransaction
from jobchain.worker import Attempt, Completed, Processors


async def start(client: Client, tx: Transaction) -> None:
    await client.start_chain(tx, place_order, Order("o-1"))
    await client.start_chain(tx, quote, Order("o-1"))
    # E: Argument 2 to "start_chain" of "Client" has incompatible type "JobType[Order, None, tuple[
    # fix: await client.start_chain(tx, quote, Order("o-1"))
    await client.start_chain(tx, pack, Order("o-1"))
    # E: Argument "job_type" to "ChainStart" has incompatible type
    # fix: await client.start_chains(tx, [ChainStart(job_type=place_order, input=Order("o-2"))])
    await client.start_chains(tx, [ChainStart(job_type=pack, input=Order("o-2"))])


def start_sync(client: SyncClient, tx: SyncTransaction) -> None:
    # E: Argument 2 to "start_chain" of "SyncClient" has incompatible type
    # fix: client.start_chain(tx, place_order, Order("o-1"))
    client.start_chain(tx, pack, Order("o-1"))


async def fan_out(attempt: Attempt[Order, int]) -> Completed:
    # E: Argument 1 to "start_chain" of "Attempt" has incompatible type
    # fix: await attempt.start_chain(quote, attempt.input)
    await attempt.start_chain(pack, attempt.input)
    return await attempt.complete(1)


processors = Processors()
# E: Argument 2 to "periodic" of "Processors" has incompatible type
# fix: processors.periodic("0 3 * * *", quote, Order("nightly"))
processors.periodic("0 3 * * *", pack, Order("nightly"))
