"""The job types every case uses: a small order graph declared with tuples (mypy-checked)."""

from __future__ import annotations

from dataclasses import dataclass

from jobchain import JobTypes


@dataclass
class Order:
    id: str


@dataclass
class Parcel:
    order_id: str
    weight: int


@dataclass
class Receipt:
    number: str


types = JobTypes()
ship = types.define("ship", input=Parcel, output=Receipt, continues_with=())
pack = types.define("pack", input=Order, output=None, continues_with=(ship,))
refund = types.define("refund", input=Order, output=Receipt)
place_order = types.define("place_order", input=Order, output=None, entry=True, continues_with=(pack, refund))
quote = types.define("quote", input=Order, output=int, entry=True)
