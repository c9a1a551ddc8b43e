"""Text no backend can store (NUL, lone surrogates) and handler errors that cannot be printed.

Every backend refuses the same keys and values before anything is sent, with an
``InvalidArgumentError`` that names the field; a handler error whose text holds such characters,
or whose ``__str__`` raises, is still recorded (escaped) and its job retried, never left running
until its lease expires.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from jobchain import Deduplication, InvalidArgumentError, JobTypes
from jobchain.worker import Attempt, Completed, Processors
from jobchain_conformance.suites._integration_base import IntegrationEnv, Tag

LONE_SURROGATE: str = json.loads('"order-\\ud800"')
"""What ``json.loads`` returns for a JSON string holding half a surrogate pair."""


class UnprintableError(Exception):
    def __str__(self) -> str:
        raise RuntimeError("__str__ is broken too")


def _raise(kind: str) -> None:
    if kind == "lone-surrogate":
        raise ValueError(f"bad request {LONE_SURROGATE}")
    if kind == "nul":
        raise ValueError("bad request \x00 from a C library")
    raise UnprintableError()


class HostileTextTests:
    """Unstorable text is refused the same way everywhere; handler errors are always recorded."""

    @pytest.mark.parametrize(
        "field",
        [
            "deduplication-surrogate",
            "deduplication-nul",
            "deduplication-too-long",
            "ordering-surrogate",
            "input-nul",
            "input-surrogate",
            "input-key-surrogate",
        ],
    )
    async def test_unstorable_keys_and_values_are_refused_and_nothing_is_written(
        self, env: IntegrationEnv, field: str
    ) -> None:
        types = JobTypes()
        loose = types.define("loose", input=dict[str, Any], output=None, entry=True)
        client = env.client(types)
        options: dict[str, Any] = {}
        value: dict[str, Any] = {"ok": "fine"}
        if field == "deduplication-surrogate":
            options["deduplication"] = lambda: Deduplication(key=LONE_SURROGATE)
        elif field == "deduplication-nul":
            options["deduplication"] = lambda: Deduplication(key="key\x00")
        elif field == "deduplication-too-long":
            options["deduplication"] = lambda: Deduplication(key="k" * 256)
        elif field == "ordering-surrogate":
            options["ordering_key"] = LONE_SURROGATE
        elif field == "input-nul":
            value = {"note": "a\x00b"}
        elif field == "input-surrogate":
            value = {"note": LONE_SURROGATE}
        else:
            value = {LONE_SURROGATE: 1}

        async def start(tx: Any) -> None:
            # Deduplication refuses its key when built: inside the raises block too.
            if "deduplication" in options:
                options["deduplication"] = options["deduplication"]()
            await client.start_chain(tx, loose, value, **options)

        # The transaction commits after the refusal: an empty listing proves nothing was written.
        async with client.transaction() as tx:
            with pytest.raises(InvalidArgumentError) as raised:
                await start(tx)
        message = str(raised.value)
        assert "\x00" not in message, "the message echoes the bad text"
        assert "\ud800" not in message, "the message echoes the bad text"
        expected = {"deduplication": "Deduplication.key", "ordering": "ordering_key", "input": "$"}
        assert expected[field.split("-")[0]] in message
        # The same client still works, and the refused start wrote nothing.
        assert await env.chains_of_type(client, loose) == []
        started = await env.start(client, loose, {"ok": "after"})
        assert [c.id for c in await env.chains_of_type(client, loose)] == [started.id]

    @pytest.mark.parametrize("kind", ["lone-surrogate", "nul", "str-raises"])
    async def test_an_unprintable_handler_error_is_recorded_and_the_job_retried(
        self, env: IntegrationEnv, kind: str
    ) -> None:
        types = JobTypes()
        hostile = types.define("hostile", input=None, output=Tag, entry=True)
        procs = Processors()

        async def handle(attempt: Attempt[None, Tag]) -> Completed:
            if attempt.job.attempt == 1:
                _raise(kind)
            return await attempt.complete(Tag(tag="recovered"))

        procs.register(hostile, handle)
        client = env.client(types)
        started = await env.start(client, hostile, None)
        failed = await env.run_until_failed(client, procs, started.id)
        error = failed.last_attempt_error
        assert error is not None
        assert "\x00" not in error
        assert "\ud800" not in error
        expected = {"lone-surrogate": "\\ud800", "nul": "\\x00", "str-raises": "UnprintableError"}[kind]
        assert expected in error
        [entry] = (await env.job(client, started.id)).attempt_errors
        assert entry.error_type == ("UnprintableError" if kind == "str-raises" else "ValueError")
        assert "\x00" not in entry.message
        assert "\ud800" not in entry.message
        chain = await env.retry_now(client, procs, started.id, started.id)
        assert chain.output == {"tag": "recovered"}
