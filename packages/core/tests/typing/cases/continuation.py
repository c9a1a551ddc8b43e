"""continue_with to a type that is not in the current type's continues_with is a mypy error."""

from __future__ import annotations

from shop import Order, Parcel, Receipt, pack, place_order, quote, refund, ship

from jobchain import Completion, JobType
from jobchain.worker import Attempt, Completed, Processors

PlaceOrderNext = tuple[JobType[Order, None], JobType[Order, Receipt]]


async def on_place_order(attempt: Attempt[Order, None, PlaceOrderNext]) -> Completed:
    if attempt.input.id == "refund":
        return await attempt.continue_with(refund, attempt.input)
    # E: No overload variant of "continue_with" of "Attempt" matches argument types "JobType[Parcel, Receipt,
    # fix: return await attempt.continue_with(pack, attempt.input)
    return await attempt.continue_with(ship, Parcel(attempt.input.id, 3))


async def on_place_order_again(attempt: Attempt[Order, None, PlaceOrderNext]) -> Completed:
    # E: Argument 1 to "continue_with" of "Attempt" has incompatible type "JobType[Order, int,
    # fix: return await attempt.continue_with(pack, attempt.input)
    return await attempt.continue_with(quote, attempt.input)


async def on_pack(attempt: Attempt[Order, None, tuple[JobType[Parcel, Receipt]]]) -> Completed:
    # E: Argument 2 to "continue_with" of "Attempt" has incompatible type "Order"; expected "Parcel"
    # fix: return await attempt.continue_with(ship, Parcel(attempt.input.id, 3))
    return await attempt.continue_with(ship, attempt.input)


async def on_ship(attempt: Attempt[Parcel, Receipt, tuple[()]]) -> Completed:
    # E: Invalid self argument "Attempt[Parcel, Receipt, tuple[()]]" to attribute function "continue_with"
    # fix: return await attempt.complete(Receipt("r-1"))
    return await attempt.continue_with(pack, Order("o-1"))


async def finish_by_hand(completion: Completion[Order, None, PlaceOrderNext]) -> None:
    # E: No overload variant of "continue_with" of "Completion" matches argument types
    # fix: await completion.continue_with(pack, Order("o-1"))
    await completion.continue_with(ship, Parcel("o-1", 3))


async def finish_refund(attempt: Attempt[Order, Receipt]) -> Completed:
    return await attempt.complete(Receipt("r-2"))


processors = Processors()
processors.register(place_order, on_place_order)
processors.register(pack, on_pack)
processors.register(ship, on_ship)
# E: Argument 2 to "register" of "Processors" has incompatible type
# fix: processors.register(refund, finish_refund)
processors.register(refund, on_pack)
