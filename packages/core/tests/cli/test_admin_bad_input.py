"""Bad input to the admin commands: one line and exit 1 for what the state says, usage errors
(exit 2) for what the command line says, never a traceback, and user data shown as text."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from pathlib import Path

import pytest

import jobchain
from jobchain.contracts.state import WorkerHeartbeat
from jobchain.entities import WorkerState

from .helpers import cli, ok_json, one_line_error
from .shop import SEND_EMAIL, TYPES, Shop

HOSTILE = "[/oops] [bold]not bold[/bold] [link=http://x]"


def test_an_unreachable_server_is_one_line() -> None:
    line = one_line_error(cli("postgresql://postgres:s3cret@127.0.0.1:1/test", "jobs", "list"))
    assert "cannot connect" in line
    assert "s3cret" not in line


def test_an_unknown_scheme_is_one_line() -> None:
    line = one_line_error(cli("mysql://app:s3cret@db/app", "stats"))
    assert "mysql://" in line
    assert "s3cret" not in line


@pytest.mark.parametrize("args", [("jobs", "list"), ("chains", "list"), ("workers",), ("stats",)])
def test_an_unmigrated_database_names_the_command_to_run(tmp_path: Path, args: tuple[str, ...]) -> None:
    url = f"sqlite:///{tmp_path}/fresh.db"
    line = one_line_error(cli(url, *args))
    assert f"run `jobchain migrate --state {url}` first" in line


def test_unknown_ids_in_every_command_that_takes_ids(shop: Shop) -> None:
    unknown = "01938c7e-0000-7000-8000-999999999999"
    for args in (
        ("jobs", "show", unknown),
        ("chains", "show", unknown),
        ("retry", unknown),
        ("retry", "--chain", unknown),
        ("cancel", unknown, "--yes"),
        ("delete", unknown, "--yes"),
        ("trigger", unknown),
    ):
        assert unknown in one_line_error(cli(shop.url, *args)), args


def test_malformed_ids_are_usage_errors(shop: Shop) -> None:
    for args in (
        ("jobs", "show", "x"),
        ("chains", "show", "x"),
        ("retry", "x"),
        ("cancel", "x"),
        ("delete", "x"),
        ("trigger", "x"),
    ):
        result = cli(shop.url, *args)
        assert result.exit_code == 2, (args, result.output)
        assert "is not a" in result.stderr, args


def test_user_data_is_shown_as_written(shop: Shop) -> None:
    async def hostile() -> str:
        client = await jobchain.connect(shop.url, notify="none", job_types=TYPES, migrate=False)
        async with client:
            async with client.transaction() as tx:
                started = await client.start_chain(tx, SEND_EMAIL, HOSTILE)
            async with client.transaction() as tx:
                await client.cancel_chains(tx, [started.id], reason=HOSTILE)
            async with client.state.transaction() as stx:
                await stx.worker_heartbeat(
                    WorkerHeartbeat(
                        worker_id="w-hostile",
                        name=HOSTILE,
                        host=HOSTILE,
                        pid=1,
                        version="0",
                        type_names=[SEND_EMAIL.name],
                        concurrency=1,
                        inflight=0,
                        state=WorkerState.RUNNING,
                        alive_for=timedelta(minutes=5),
                    )
                )
            return started.id

    chain_id = asyncio.run(hostile())
    for args in (("jobs", "show", chain_id), ("chains", "show", chain_id), ("workers",)):
        result = cli(shop.url, *args)
        assert result.exit_code == 0, (args, result.output)
        assert "[/oops]" in result.stdout, args
    assert ok_json(shop.url, "jobs", "show", chain_id)["job"]["cancel_reason"] == HOSTILE
