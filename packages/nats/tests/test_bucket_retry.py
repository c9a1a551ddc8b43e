"""Binding the KV bucket retries JetStream's transient server errors, and only those.

The error is provoked for real on a private nats-server: a plain file where the server makes
the account's store directory (``<store>/jetstream/$G``) makes its stream creation fail with
``code=500 err_code=10049 'error creating store for stream'``, the answer the shared server gave
when a create met the cleanup of the account's last deleted stream. (chmod would not do: the
tests run as root, which ignores permissions.) The file is removed from a logging handler when
the adapter reports its first retry, so the second attempt meets a healthy store: no timing.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import nats
import nats.errors
import nats.js.errors
import pytest

from jobchain.errors import BackendUnreachableError, InvalidArgumentError
from jobchain_nats import NatsNotifyAdapter, NatsNotifyOptions
from jobchain_nats.wake_hints import BIND_ATTEMPTS, is_transient

# A JetStream request on a loaded machine may take longer than the adapter's default 1 s: these
# cases are about which errors are retried, not about how fast a stream is created.
OPTIONS = NatsNotifyOptions(
    prefix="retry", kv_bucket="hints", kv_create=True, request_timeout=timedelta(seconds=30)
)
STORE_FAILED = 10049


class Retries(logging.Handler):
    """Collects the adapter's retry records; calls ``on_first`` when the first one arrives."""

    def __init__(self, on_first: Callable[[], None] | None = None) -> None:
        super().__init__(logging.INFO)
        self.records: list[logging.LogRecord] = []
        self._on_first = on_first

    def emit(self, record: logging.LogRecord) -> None:
        if not hasattr(record, "nats_err_code"):
            return
        self.records.append(record)
        if len(self.records) == 1 and self._on_first is not None:
            self._on_first()


@contextmanager
def watching(handler: Retries, caplog: pytest.LogCaptureFixture) -> Iterator[Retries]:
    caplog.set_level(logging.INFO, logger="jobchain_nats")
    logger = logging.getLogger("jobchain_nats")
    logger.addHandler(handler)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)


def block_account_store(server: Any) -> Path:
    """Put a file where the server makes the global account's store directory."""
    account_dir = Path(server.directory) / "jetstream" / "$G"
    assert not account_dir.exists(), "the private server has no stream yet"
    account_dir.write_bytes(b"")
    return account_dir


async def test_a_store_failure_while_creating_the_bucket_is_retried(
    private_nats: Any, caplog: pytest.LogCaptureFixture
) -> None:
    blocker = block_account_store(private_nats)
    with watching(Retries(on_first=blocker.unlink), caplog) as retries:
        adapter = await NatsNotifyAdapter.connect(private_nats.url, options=OPTIONS)
    try:
        assert [r.nats_err_code for r in retries.records] == [STORE_FAILED]  # type: ignore[attr-defined]
        assert "error creating store for stream" in retries.records[0].getMessage()
        # The bucket is real and tracks budgets.
        await adapter.provide_wake_hint("t", 1)
        assert await adapter.consume_wake_hint("t") is True
        assert await adapter.consume_wake_hint("t") is False
    finally:
        await adapter.close()


async def test_from_connection_retries_the_same_way(
    private_nats: Any, caplog: pytest.LogCaptureFixture
) -> None:
    blocker = block_account_store(private_nats)
    nc = await nats.connect(private_nats.url)
    try:
        with watching(Retries(on_first=blocker.unlink), caplog) as retries:
            adapter = await NatsNotifyAdapter.from_connection(nc, options=OPTIONS)
        await adapter.close()
        assert len(retries.records) == 1
        info = await nc.jetstream().stream_info("KV_hints")
        assert info.config.max_msgs_per_subject == 1
    finally:
        await nc.close()


async def test_a_store_failure_that_persists_ends_in_the_typed_error(
    private_nats: Any, caplog: pytest.LogCaptureFixture
) -> None:
    block_account_store(private_nats)
    with watching(Retries(), caplog) as retries:
        with pytest.raises(BackendUnreachableError, match="error creating store for stream") as caught:
            await NatsNotifyAdapter.connect(private_nats.url, options=OPTIONS)
    assert len(retries.records) == BIND_ATTEMPTS - 1
    assert "hints" in str(caught.value)


async def test_a_refused_bucket_is_not_retried_and_says_what_to_change(
    private_nats: Any, caplog: pytest.LogCaptureFixture
) -> None:
    # A stream of another name already takes the bucket's subjects: a client error (400).
    nc = await nats.connect(private_nats.url)
    try:
        await nc.jetstream().add_stream(name="squatter", subjects=["$KV.hints.>"])
    finally:
        await nc.close()
    with watching(Retries(), caplog) as retries:
        with pytest.raises(InvalidArgumentError, match=r"refused to create .*'hints'.*overlap"):
            await NatsNotifyAdapter.connect(private_nats.url, options=OPTIONS)
    assert retries.records == []


def _raised_by(raise_it: Callable[[], object]) -> BaseException:
    try:
        raise_it()
    except Exception as exc:  # the exception nats-py builds is the point
        return exc
    raise AssertionError("nothing raised")


def _api_error(code: int, err_code: int, description: str) -> BaseException:
    """The exception nats-py raises for a JetStream API error answer (``_api_request``)."""
    answer = {"code": code, "err_code": err_code, "description": description}
    return _raised_by(lambda: nats.js.errors.APIError.from_error(answer))


@pytest.mark.parametrize(
    ("error", "transient"),
    [
        (_api_error(500, 10049, "error creating store for stream"), True),
        (_api_error(503, 10008, "JetStream system temporarily unavailable"), True),
        (_api_error(500, 10009, "JetStream cluster can not handle request"), True),
        (_api_error(503, 10076, "JetStream not enabled"), False),
        (_api_error(500, 10047, "insufficient storage resources available"), False),
        (_api_error(400, 10065, "subjects overlap with an existing stream"), False),
        (_api_error(400, 10058, "stream name already in use with a different configuration"), False),
        (_api_error(404, 10059, "stream not found"), False),
        (nats.js.errors.ServiceUnavailableError(), False),  # what nats-py makes of "no responders"
        (nats.errors.TimeoutError(), False),
    ],
    ids=lambda value: str(getattr(value, "err_code", None) or type(value).__name__),
)
def test_only_server_errors_of_a_passing_state_are_transient(error: BaseException, transient: bool) -> None:
    assert is_transient(error) is transient
