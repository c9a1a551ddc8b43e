"""attempt.blocker_output / blocker_outputs at run time: typed values, the right chain, clear errors."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import pytest

from jobchain import Client, FailJob, JobTypes
from jobchain.errors import ChainFailedError, InvalidArgumentError
from jobchain.memory.notify import MemoryNotifyAdapter
from jobchain.memory.state import MemoryStateAdapter
from jobchain.worker import Attempt, Completed, Processors, Worker


@dataclass
class Size:
    width: int
    height: int


types = JobTypes()
measure = types.define("measure", input=str, output=Size, entry=True)
parse = types.define("parse", input=str, output=int)
fetch = types.define("fetch", input=str, output=str, entry=True, continues_with=(parse,))
broken = types.define("broken", input=None, output=int, entry=True)
report = types.define("report", input=None, output=str, entry=True, runs_after_failed_blockers=True)
elsewhere = JobTypes().define("parse", input=str, output=int)


def processors(seen: dict[str, Any]) -> Processors:
    slice_ = Processors()

    @slice_.handler(measure)
    async def on_measure(attempt: Attempt[str, Size]) -> Completed:
        return await attempt.complete(Size(len(attempt.input), 2 * len(attempt.input)))

    @slice_.handler(fetch)
    async def on_fetch(attempt: Attempt[str, str, tuple[Any]]) -> Completed:
        return await attempt.continue_with(parse, attempt.input * 2)

    @slice_.handler(parse)
    async def on_parse(attempt: Attempt[str, int]) -> Completed:
        return await attempt.complete(len(attempt.input))

    @slice_.handler(broken)
    async def on_broken(attempt: Attempt[None, int]) -> Completed:
        raise FailJob("no luck")

    @slice_.handler(report)
    async def on_report(attempt: Attempt[None, str]) -> Completed:
        seen["size"] = await attempt.blocker_output(measure)
        seen["parsed"] = await attempt.blocker_outputs(parse)
        seen["first"] = await attempt.blocker_output(parse, chain=seen["fetch_ids"][0])
        seen["none"] = await attempt.blocker_outputs(fetch)
        calls: dict[str, Callable[[], Awaitable[object]]] = {
            "by_entry_type": lambda: attempt.blocker_output(fetch),
            "ambiguous": lambda: attempt.blocker_output(parse),
            "wrong_chain_type": lambda: attempt.blocker_output(measure, chain=seen["fetch_ids"][1]),
            "not_a_blocker": lambda: attempt.blocker_output(parse, chain=attempt.job.chain_id),
            "failed": lambda: attempt.blocker_output(broken),
            "foreign_type": lambda: attempt.blocker_output(elsewhere),
        }
        for key, call in calls.items():
            try:
                await call()
            except Exception as error:
                seen[key] = error
        return await attempt.complete("done")

    return slice_


async def test_blocker_outputs_are_decoded_by_the_type_each_chain_ended_with() -> None:
    seen: dict[str, Any] = {}
    client = Client(MemoryStateAdapter(), MemoryNotifyAdapter(), types)
    async with client, Worker(client, processors(seen), concurrency=4, poll_interval=0.05):
        async with client.transaction() as tx:
            sized = await client.start_chain(tx, measure, "cat")
            fetched = [await client.start_chain(tx, fetch, text) for text in ("ab", "abcd")]
            failing = await client.start_chain(tx, broken, None)
            seen["fetch_ids"] = [started.id for started in fetched]
            root = await client.start_chain(
                tx, report, None, blockers=[sized.chain, *(s.chain for s in fetched), failing.chain]
            )
        chain = await client.await_chain(root.id, timeout=20, poll_interval=0.05)

    assert chain.output == "done"
    assert seen["size"] == Size(3, 6)  # a dataclass, not the stored dict
    assert seen["parsed"] == [4, 8]  # in blocker order: "abab", "abcdabcd"
    assert seen["first"] == 4
    assert seen["none"] == []  # the fetch chains ended with parse jobs
    errors = {key: value for key, value in seen.items() if isinstance(value, Exception)}
    assert set(errors) == {
        "by_entry_type",
        "ambiguous",
        "wrong_chain_type",
        "not_a_blocker",
        "failed",
        "foreign_type",
    }
    assert isinstance(errors["by_entry_type"], InvalidArgumentError)
    assert "ended with a 'fetch' job" in str(errors["by_entry_type"])
    assert "fetch ended with parse" in str(errors["by_entry_type"])
    assert isinstance(errors["ambiguous"], InvalidArgumentError)
    assert "2 blocker chains ended with a 'parse' job" in str(errors["ambiguous"])
    assert "chain=" in str(errors["ambiguous"])
    assert isinstance(errors["wrong_chain_type"], InvalidArgumentError)
    assert "ended with a 'parse' job, not 'measure'" in str(errors["wrong_chain_type"])
    assert isinstance(errors["not_a_blocker"], InvalidArgumentError)
    assert "is not a blocker of this job" in str(errors["not_a_blocker"])
    assert isinstance(errors["failed"], ChainFailedError)
    assert errors["failed"].chain_id == failing.id
    assert isinstance(errors["foreign_type"], InvalidArgumentError)
    assert "not the one registered" in str(errors["foreign_type"])


def test_outputs_of_refuses_a_bad_chain_reference() -> None:
    from jobchain.worker.blocker_outputs import chain_id_of

    with pytest.raises(InvalidArgumentError):
        chain_id_of(42)
