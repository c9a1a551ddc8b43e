"""The lifecycle documentation states the code's own names and numbers.

The runnable examples (test_docs_examples.py) prove the behaviour; these checks keep the prose
from drifting when a constant, a status, an abort reason, an error or a client method changes:
every one of them must still be named where the docs promise it.
"""

from __future__ import annotations

import inspect
import re
from datetime import timedelta
from pathlib import Path

import jobchain
from jobchain.client_lifecycle import DEFAULT_RETRY_CHAINS_LIMIT, ClientLifecycle
from jobchain.entities import ATTEMPT_ERRORS_KEPT, MAX_ERROR_MESSAGE_CHARS, MAX_TRACEBACK_CHARS, JobStatus
from jobchain.job_types import DEFAULT_MAX_ATTEMPTS
from jobchain.worker import AbortReason, Retention
from jobchain.worker.deadline import TIMEOUT_GRACE_SECONDS
from jobchain.worker.runner import WATCH_AFTER_SECONDS

DOCS = Path(__file__).resolve().parents[3] / "docs"
GUIDE = DOCS / "guides" / "errors-and-reliability.md"


def _text(page: str) -> str:
    return (DOCS / page).read_text(encoding="utf-8")


def _flat(text: str) -> str:
    """``text`` with every run of whitespace as one space (prose is rewrapped freely)."""
    return " ".join(text.split())


def _section(text: str, heading: str) -> str:
    """The body of the ``## heading`` section (up to the next ``## ``)."""
    start = text.index(f"\n## {heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


def _number(value: float) -> str:
    return f"{value:,.0f}".replace(",", " ") if value >= 1000 else f"{value:g}"


def test_the_lifecycle_section_names_every_status() -> None:
    section = _section(_text("concepts.md"), "The job lifecycle")
    missing = [s.value for s in JobStatus if f"`{s.value}" not in section]
    assert missing == []


def test_the_abort_signal_table_lists_every_reason() -> None:
    section = _section(GUIDE.read_text(encoding="utf-8"), "The abort signal")
    rows = set(re.findall(r"^\| `([a-z_]+)` \|", section, re.MULTILINE))
    assert rows == {reason.value for reason in AbortReason}


def test_the_stated_limits_are_the_codes() -> None:
    guide = _flat(GUIDE.read_text(encoding="utf-8"))
    assert f"DEFAULT_MAX_ATTEMPTS = {DEFAULT_MAX_ATTEMPTS}" in guide
    assert f"the last {ATTEMPT_ERRORS_KEPT} entries" in guide
    assert f"first {_number(MAX_ERROR_MESSAGE_CHARS)} characters" in guide
    assert f"last** {_number(MAX_TRACEBACK_CHARS)} characters" in guide
    assert f"grace ({TIMEOUT_GRACE_SECONDS:g} s," in guide
    assert f"run for {WATCH_AFTER_SECONDS:g} s" in guide
    assert f"limit={DEFAULT_RETRY_CHAINS_LIMIT}" in guide
    defaults = Retention(completed=timedelta(days=1))
    assert defaults.interval == timedelta(minutes=1)
    assert "(default 1 minute" in guide
    assert f"per statement ({defaults.batch_size})" in guide
    assert f"per run ({defaults.max_batches})" in guide


def test_the_client_reference_documents_every_lifecycle_method() -> None:
    reference = _text("reference/client.md")
    methods = [
        name
        for name, member in vars(ClientLifecycle).items()
        if inspect.iscoroutinefunction(member) and not name.startswith("_")
    ]
    assert methods, "ClientLifecycle has no public methods?"
    assert [m for m in methods if f"### `{m}`" not in reference and f"/ `{m}`" not in reference] == []


def test_the_errors_reference_lists_every_lifecycle_error() -> None:
    reference = _text("reference/errors.md")
    names = [
        "JobCancelledError",
        "JobFinishedError",
        "JobNotRetryableError",
        "ChainNotCancellableError",
        "ChainFailedError",
        "ChainCancelledError",
        "FailJob",
        "JobTimeoutError",
    ]
    assert all(hasattr(jobchain, name) for name in names)
    assert [n for n in names if f"| `{n}` |" not in reference] == []


def test_the_job_types_reference_documents_every_define_option() -> None:
    reference = _text("reference/job-types.md")
    options = [
        name
        for name, parameter in inspect.signature(jobchain.JobTypes.define).parameters.items()
        if parameter.kind is inspect.Parameter.KEYWORD_ONLY
    ]
    assert [o for o in options if f"    {o}:" not in reference] == []
