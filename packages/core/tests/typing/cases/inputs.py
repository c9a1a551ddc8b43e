"""Inputs and outputs are still checked everywhere, including where continuations are unchecked."""

from __future__ import annotations

from shop import Order, Parcel, Receipt, pack, place_order, ship

from jobchain import Client, Transaction
from jobchain.worker import Attempt, Completed


async def start(client: Client, tx: Transaction) -> None:
    # E: Cannot infer value of type parameter "I" of "start_chain" of "Client"
    # fix: await client.start_chain(tx, place_order, Order("o-1"))
    await client.start_chain(tx, place_order, "o-1")


async def legacy(attempt: Attempt[Order, None]) -> Completed:
    """An attempt annotated with two parameters: any continuation, but typed inputs."""
    if attempt.input.id == "pack":
        return await attempt.continue_with(pack, attempt.input)
    # E: Cannot infer value of type parameter "_NI" of "continue_with" of "Attempt"
    # fix: return await attempt.continue_with(ship, Parcel(attempt.input.id, 1))
    return await attempt.continue_with(ship, attempt.input)


async def on_ship(attempt: Attempt[Parcel, Receipt]) -> Completed:
    # E: Argument 1 to "complete" of "Attempt" has incompatible type "str"; expected "Receipt"
    # fix: return await attempt.complete(Receipt("r-1"))
    return await attempt.complete("r-1")
