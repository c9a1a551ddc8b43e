"""Job types of bench/spark_bench.py, in a module Spark's Python workers can import."""

from __future__ import annotations

from dataclasses import dataclass

from jobchain import JobTypes


@dataclass
class Order:
    order_id: str
    amount: int


types = JobTypes()
process_order = types.define("process_order", input=Order, output=None, entry=True)
