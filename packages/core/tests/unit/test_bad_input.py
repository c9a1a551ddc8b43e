"""Bad input fails fast with a typed error that says what to change, and writes nothing.

Each case runs inside a transaction that then *commits*, so an empty listing afterwards
proves the client wrote nothing (not merely that a rollback hid it).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

import jobchain
from jobchain import (
    ChainNotFoundError,
    ChainStart,
    Client,
    Completion,
    Deduplication,
    DuplicateJobIdError,
    InvalidArgumentError,
    InvalidCursorError,
    InvalidJobIdError,
    InvalidPageSizeError,
    InvalidURLError,
    JobchainError,
    JobTypes,
    JobTypeValidationError,
    Schedule,
    Transaction,
    UnknownJobTypeError,
)
from jobchain.memory.notify import MemoryNotifyAdapter
from jobchain.memory.state import MemoryStateAdapter


@dataclass
class Signup:
    email: str
    age: int


types = JobTypes()
welcome = types.define("welcome", input=Signup, output=None, entry=True, blockers=[])
step = types.define("step", input=int, output=int)
loose = types.define("loose", input=dict[str, Any], output=None, entry=True, max_payload_bytes=1024)

elsewhere = JobTypes()
stranger = elsewhere.define("stranger", input=int, output=None, entry=True)
impostor = elsewhere.define("welcome", input=Signup, output=None, entry=True)

EXISTING = "2f1c7a52-2a53-4d51-9a0e-6cbb1d3c1a11"
OK = Signup(email="a@example.org", age=30)

Action = Callable[[Client, Transaction], Awaitable[Any]]


@pytest.fixture
async def client() -> AsyncIterator[Client]:
    async with Client(MemoryStateAdapter(), MemoryNotifyAdapter(), types) as c:
        async with c.transaction() as tx:
            await c.start_chain(tx, welcome, OK, id=EXISTING)
        yield c


def start(input: Any = OK, job_type: Any = welcome, **options: Any) -> Action:
    async def action(client: Client, tx: Transaction) -> Any:
        return await client.start_chain(tx, job_type, input, **options)

    return action


def schedule_after(seconds: float) -> Action:
    async def action(client: Client, tx: Transaction) -> Any:
        return await client.start_chain(tx, welcome, OK, schedule=Schedule.in_seconds(seconds))

    return action


def schedule_timedelta(seconds: float | timedelta) -> Action:
    async def action(client: Client, tx: Transaction) -> Any:
        delay = seconds if isinstance(seconds, timedelta) else timedelta(seconds=seconds)
        schedule = Schedule(after=delay)
        return await client.start_chain(tx, welcome, OK, schedule=schedule)

    return action


def dedup(**options: Any) -> Action:
    async def action(client: Client, tx: Transaction) -> Any:
        return await client.start_chain(tx, welcome, OK, deduplication=Deduplication(**options))

    return action


def batch(*starts: ChainStart[Any]) -> Action:
    async def action(client: Client, tx: Transaction) -> Any:
        return await client.start_chains(tx, list(starts))

    return action


def continue_with(job_type: Any, input: Any) -> Action:
    async def action(client: Client, tx: Transaction) -> Any:
        async def handler(completion: Completion[Any, Any]) -> None:
            await completion.continue_with(job_type, input)

        return await client.complete_chain(tx, welcome, EXISTING, handler)

    return action


FRESH = "7d7b1f0e-4a2b-4c6f-8f3e-1a2b3c4d5e6f"

CASES: dict[str, tuple[Action, type[JobchainError], str]] = {
    "unknown job type": (start(1, stranger), UnknownJobTypeError, "registered types: loose, step, welcome"),
    "same-named type of another registry": (start(OK, impostor), InvalidArgumentError, "merge its slice"),
    "non-entry type": (start(1, step), JobTypeValidationError, "declare it with entry=True"),
    "wrong input shape": (
        start(Signup(email="a@example.org", age="thirty")),  # type: ignore[arg-type]
        JobTypeValidationError,
        r"invalid_input for job type 'welcome': Expected `int`, got `str` - at `\$.age`",
    ),
    "missing field": (start({"email": "x"}), JobTypeValidationError, "missing required field `age`"),
    "NaN input": (start({"x": float("nan")}, loose), JobTypeValidationError, "use None or a finite number"),
    "set input": (start({"x": {1}}, loose), JobTypeValidationError, r"not JSON-serializable.*use a list"),
    "object input": (start({"x": object()}, loose), JobTypeValidationError, "not JSON-serializable"),
    "oversized input": (
        start({"x": "y" * 2000}, loose),
        JobTypeValidationError,
        "store large data elsewhere",
    ),
    "invalid explicit id": (start(id="job-1"), InvalidJobIdError, "canonical UUID strings"),
    "explicit id of an existing job": (
        batch(
            ChainStart(job_type=welcome, input=OK, id=FRESH),
            ChainStart(job_type=welcome, input=OK, id=EXISTING),
        ),
        DuplicateJobIdError,
        "pass a fresh id or omit id=",
    ),
    "duplicate ids in one batch": (
        batch(
            ChainStart(job_type=welcome, input=OK, id=FRESH), ChainStart(job_type=welcome, input=OK, id=FRESH)
        ),
        DuplicateJobIdError,
        "pass a fresh id",
    ),
    "negative delay": (schedule_after(-5), InvalidArgumentError, "must not be negative"),
    "NaN delay": (schedule_after(float("nan")), InvalidArgumentError, "finite number of seconds"),
    "negative timedelta": (schedule_timedelta(-1), InvalidArgumentError, "must be a non-negative delay"),
    "delay too large for a timedelta": (schedule_after(1e300), InvalidArgumentError, "at most 36500 days"),
    "timedelta.max": (schedule_timedelta(timedelta.max), InvalidArgumentError, "36500 days"),
    "lone surrogate in a deduplication key": (dedup(key="k\ud800"), InvalidArgumentError, "lone surrogate"),
    "NUL in an input string": (start({"x": "a\x00"}, loose), JobTypeValidationError, r"NUL .* at index 1"),
    "schedule that is not a Schedule": (start(schedule=5), InvalidArgumentError, r"Schedule\.in_seconds"),
    "scope any without a window": (dedup(key="k", scope="any"), InvalidArgumentError, "needs window="),
    "empty deduplication key": (dedup(key=""), InvalidArgumentError, "non-empty string"),
    "blocker on a type that allows none": (
        start(blockers=[EXISTING]),
        JobTypeValidationError,
        "allowed blocker types: \\(none\\)",
    ),
    "missing blocker chain": (start({}, loose, blockers=[FRESH]), ChainNotFoundError, FRESH),
    "blockers given as one string": (start({}, loose, blockers=EXISTING), InvalidArgumentError, "a list"),
    "continuation of an unregistered type": (continue_with(stranger, 1), UnknownJobTypeError, "registered"),
    "continuation with a wrong input": (continue_with(step, "x"), JobTypeValidationError, "Expected `int`"),
}


@pytest.mark.parametrize("case", list(CASES))
async def test_bad_start_input_raises_and_writes_nothing(client: Client, case: str) -> None:
    action, error, message = CASES[case]
    async with client.transaction() as tx:
        with pytest.raises(error, match=message):
            await action(client, tx)
    # The transaction committed: only the chain from the fixture may exist.
    assert [j.id for j in (await client.list_jobs()).items] == [EXISTING]
    assert [c.id for c in (await client.list_chains()).items] == [EXISTING]


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (lambda c: c.list_chains(limit=0), InvalidPageSizeError, "from 1 to 500"),
        (lambda c: c.list_jobs(limit=501), InvalidPageSizeError, "from 1 to 500"),
        (lambda c: c.list_chain_jobs(EXISTING, limit=True), InvalidPageSizeError, "integer"),
        (lambda c: c.list_chains(order="up"), InvalidArgumentError, "'asc' or 'desc'"),
        (lambda c: c.list_chains(cursor="garbage"), InvalidCursorError, "next_cursor of the previous page"),
        (lambda c: c.get_chain("nope"), InvalidJobIdError, "canonical UUID"),
        (lambda c: c.get_job(""), InvalidJobIdError, "canonical UUID"),
        (lambda c: c.await_chain(EXISTING, timeout=-1), InvalidArgumentError, "positive finite"),
    ],
)
async def test_bad_query_input_raises(
    client: Client, call: Callable[[Client], Awaitable[Any]], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        await call(client)


async def test_a_cursor_from_another_query_is_refused(client: Client) -> None:
    async with client.transaction() as tx:
        await client.start_chain(tx, welcome, OK)
    page = await client.list_chains(limit=1)
    assert page.next_cursor is not None
    with pytest.raises(InvalidCursorError, match="belongs to a different query"):
        await client.list_chains(limit=1, cursor=page.next_cursor, type_names=["welcome"])
    with pytest.raises(InvalidCursorError):
        await client.list_blocked_jobs(EXISTING, cursor=page.next_cursor)


async def test_bad_ids_in_trigger_and_delete_write_nothing(client: Client) -> None:
    async with client.transaction() as tx:
        with pytest.raises(InvalidJobIdError):
            await client.trigger_jobs(tx, [EXISTING, "bad"])
        with pytest.raises(InvalidJobIdError):
            await client.delete_chains(tx, [EXISTING, "bad"])
        with pytest.raises(InvalidArgumentError, match="list of chain ids"):
            await client.delete_chains(tx, EXISTING)
    assert [c.id for c in (await client.list_chains()).items] == [EXISTING]


@pytest.mark.parametrize(
    ("state", "notify", "message"),
    [
        ("postgresql//db", None, "has no scheme; expected 'scheme://"),
        ("memory://", "redis//cache", "has no scheme; expected 'scheme://"),
        ("://nothing", None, "empty scheme"),
        ("postgresql://u:secret@h:99999/db", None, "expected an integer from 1 to 65535"),
    ],
)
async def test_malformed_urls_raise_invalid_url(state: str, notify: str | None, message: str) -> None:
    with pytest.raises(InvalidURLError, match=message) as info:
        await jobchain.connect(state, notify=notify, job_types=types)
    assert "secret" not in str(info.value)


async def test_connect_needs_a_registry() -> None:
    with pytest.raises(InvalidArgumentError, match="JobTypes registry"):
        await jobchain.connect("memory://", job_types={"a": 1})  # type: ignore[arg-type]


MYPY = [sys.executable, "-m", "mypy", "--strict", "--no-error-summary"]


MYPY = [sys.executable, "-m", "mypy", "--strict", "--no-error-summary"]


def test_mypy_rejects_a_wrong_input_type_at_the_call_site(tmp_path: Path) -> None:
    snippet = tmp_path / "wrong_input.py"
    snippet.write_text(
        textwrap.dedent(
            """
            from dataclasses import dataclass
            from jobchain import ChainStart, Client, JobTypes

            @dataclass
            class Email:
                to: str

            types = JobTypes()
            send = types.define("send", input=Email, output=None, entry=True)

            async def ok(client: Client) -> None:
                async with client.transaction() as tx:
                    await client.start_chain(tx, send, Email(to="a@example.org"))

            async def wrong(client: Client) -> None:
                async with client.transaction() as tx:
                    await client.start_chain(tx, send, {"to": 1})  # line 18
                    ChainStart(job_type=send, input=42)  # line 19
            """
        )
    )
    result = subprocess.run(
        [*MYPY, "--cache-dir", str(tmp_path / ".mypy"), str(snippet)],
        capture_output=True,
        text=True,
        timeout=110,
        check=False,
    )
    errors = [line for line in result.stdout.splitlines() if ": error:" in line]
    assert result.returncode == 1, result.stdout + result.stderr
    assert {line.split(":")[1] for line in errors} == {"18", "19"}, result.stdout
