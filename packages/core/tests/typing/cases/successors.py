"""A handler annotated with successors that differ from its type's continues_with is an error.

The job type carries the exact tuple of ``continues_with`` (its ``N``); a handler names its
successors in ``Attempt[I, O, Next]``. ``Processors.register`` and ``Processors.handler``
require the two to agree: same length, same order, each successor's input and output. A handler
annotated ``Attempt[I, O]`` (no successors: any, checked at run time) and a job type declared
without a tuple (``AnyContinuation``) accept each other as before (compat.py).
"""

from __future__ import annotations

from typing import Any

from shop import Order, Parcel, Receipt, pack, place_order, quote, refund, ship, types

from jobchain import JobType
from jobchain.worker import Attempt, Completed, Processors

PlaceOrderNext = tuple[JobType[Order, None], JobType[Order, Receipt]]
# quote (Order -> int) in place of refund: a successor place_order may not continue with.
QuoteInstead = tuple[JobType[Order, None], JobType[Order, int]]
Reversed = tuple[JobType[Order, Receipt], JobType[Order, None]]
PackOnly = tuple[JobType[Order, None]]


async def on_place_order(attempt: Attempt[Order, None, PlaceOrderNext]) -> Completed:
    return await attempt.continue_with(pack, attempt.input)


async def on_place_order_quote(attempt: Attempt[Order, None, QuoteInstead]) -> Completed:
    return await attempt.continue_with(pack, attempt.input)


async def on_place_order_reversed(attempt: Attempt[Order, None, Reversed]) -> Completed:
    return await attempt.continue_with(pack, attempt.input)


async def on_place_order_pack_only(attempt: Attempt[Order, None, PackOnly]) -> Completed:
    return await attempt.continue_with(pack, attempt.input)


async def on_place_order_untyped(attempt: Attempt[Order, None]) -> Completed:
    return await attempt.continue_with(pack, attempt.input)


async def on_any(attempt: Attempt[Any, Any, Any]) -> Completed:
    return await attempt.complete(None)


async def on_pack(attempt: Attempt[Order, None, tuple[JobType[Parcel, Receipt]]]) -> Completed:
    return await attempt.continue_with(ship, Parcel(attempt.input.id, 3))


async def on_pack_final(attempt: Attempt[Order, None, tuple[()]]) -> Completed:
    return await attempt.complete(None)


async def on_refund(attempt: Attempt[Order, Receipt, PackOnly]) -> Completed:
    return await attempt.continue_with(pack, attempt.input)


processors = Processors()
# E: Argument 2 to "register" of "Processors" has incompatible type
# fix: processors.register(place_order, on_place_order)
processors.register(place_order, on_place_order_quote)
# E: Argument 2 to "register" of "Processors" has incompatible type
# fix: processors.register(place_order, on_place_order)
processors.register(place_order, on_place_order_reversed)
# E: Argument 2 to "register" of "Processors" has incompatible type
# fix: processors.register(place_order, on_place_order)
processors.register(place_order, on_place_order_pack_only)
# E: Argument 2 to "register" of "Processors" has incompatible type
# fix: processors.register(pack, on_pack)
processors.register(pack, on_pack_final)

# Unchanged: no successors named, any attempt, and a type declared without a tuple.
processors.register(place_order, on_place_order)
processors.register(place_order, on_place_order_untyped)
processors.register(place_order, on_any)
processors.register(refund, on_refund)

# The decorator form checks the same (the error is on the decorator line): the fix is the job
# type whose continues_with the handler names.
pack_or_quote = types.define("pack_or_quote", input=Order, output=None, continues_with=(pack, quote))
decorated = Processors()


# E: Argument 1 has incompatible type "Callable[[Attempt[Order, None, tuple[JobType[Order, None, Any
# fix: @decorated.handler(pack_or_quote)
@decorated.handler(place_order)
async def decorated_quote(attempt: Attempt[Order, None, QuoteInstead]) -> Completed:
    return await attempt.continue_with(pack, attempt.input)


@decorated.handler(place_order)
async def decorated_untyped(attempt: Attempt[Order, None]) -> Completed:
    return await attempt.continue_with(refund, attempt.input)


@decorated.handler(pack)
async def decorated_exact(attempt: Attempt[Order, None, tuple[JobType[Parcel, Receipt]]]) -> Completed:
    return await attempt.continue_with(ship, Parcel(attempt.input.id, 1))


@decorated.handler(refund)
async def decorated_legacy(attempt: Attempt[Order, Receipt, PackOnly]) -> Completed:
    return await attempt.continue_with(pack, attempt.input)
