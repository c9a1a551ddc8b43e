"""Numbers keep their JSON type: an int comes back an int and a float a float, with its value.

A backend that stores JSON numbers as decimals can lose the difference: ``1e16`` handed over
in exponent form (``1e+16``) is the integer 10000000000000000 to such a store, and comes back
as an int. Python's ``1e16 == 10**16`` hides that from an
equality check, so the cases compare each number's type and ``repr``.
"""

from __future__ import annotations

import sys
from typing import Any

from jobchain import JobTypes
from jobchain.worker import Attempt, Completed, Processors
from jobchain_conformance.suites._integration_base import IntegrationEnv

NUMBERS: dict[str, Any] = {
    "zero": 0,
    "int": 7,
    "int_1e17": 10**17,
    "int_negative": -(10**17),
    "int64_max": 2**63 - 1,
    "float_zero": 0.0,
    "float_integral": 3.0,
    "float_half": 0.5,
    "float_2_53": 2.0**53,
    "float_1e16": 1e16,
    "float_1_5e16": 1.5e16,
    "float_negative_1e17": -1e17,
    "float_1e300": 1e300,
    "float_max": sys.float_info.max,
    "float_1_5e_minus_300": 1.5e-300,
    "float_smallest_subnormal": 5e-324,
    "float_1e_minus_5": 1e-5,
    "nested": [1, 1.0, 1e16, {"deep": 2e20, "count": 2}],
}
"""Ints and floats at the edges of their text forms (exponent, integral, subnormal), nested too."""


def typed(value: Any) -> Any:
    """``value`` with every number replaced by (type name, repr), so 1e16 and 10**16 differ."""
    if isinstance(value, dict):
        return {key: typed(item) for key, item in value.items()}
    if isinstance(value, list):
        return [typed(item) for item in value]
    if isinstance(value, (bool, int, float)):
        return (type(value).__name__, repr(value))
    return value


class NumberTypeTests:
    """Every number in an input or an output round-trips with its JSON type and exact value."""

    async def test_input_numbers_keep_their_type_and_value(self, env: IntegrationEnv) -> None:
        types = JobTypes()
        numbers = types.define("numbers", input=dict[str, Any], output=None, entry=True)
        client = env.client(types)
        started = await env.start(client, numbers, NUMBERS)
        assert typed((await env.job(client, started.id)).input) == typed(NUMBERS)
        assert typed((await env.chain(client, started.id)).root.input) == typed(NUMBERS)

    async def test_a_handler_sees_input_numbers_and_its_output_keeps_their_type_and_value(
        self, env: IntegrationEnv
    ) -> None:
        types = JobTypes()
        echo = types.define("echo", input=dict[str, Any], output=dict[str, Any], entry=True)
        procs = Processors()
        seen: list[Any] = []

        @procs.handler(echo)
        async def handle(attempt: Attempt[dict[str, Any], dict[str, Any]]) -> Completed:
            seen.append(attempt.input)
            return await attempt.complete(attempt.input)

        client = env.client(types)
        async with env.worker(client, procs):
            started = await env.start(client, echo, NUMBERS)
            chain = await env.await_chain(client, started.id)
        assert [typed(value) for value in seen] == [typed(NUMBERS)]
        assert typed(chain.output) == typed(NUMBERS)
        assert typed((await env.job(client, started.id)).output) == typed(NUMBERS)
