"""The notify suite catches what one adapter alone cannot show: deliberately wrong variants of
the in-process notify adapter must fail named cases, while the correct adapter passes them.

- ``PrivateBrokerNotify`` ignores the hub it is given, so it delivers only to its own
  listeners (and keeps its own wake budgets): a backend that fans out in-process and never
  through its broker. It passes every single-adapter case.
- ``NoResubscribeNotify`` does not subscribe again after its hub dropped its subscriptions
  (``MemoryNotifyHub.interrupt``, the in-process stand-in for a broken connection).

Only the notify suite runs in the inner session (a few seconds), with the suite's timeouts
shortened: the memory adapters deliver synchronously and reconnect at once, so a short
timeout only ever cuts short the waits of a broken variant.
"""

from __future__ import annotations

import pytest

INI = """
[pytest]
asyncio_mode = auto
asyncio_default_fixture_loop_scope = function
"""

BROKEN_ADAPTERS = '''
from collections.abc import AsyncIterator

import pytest

from jobchain.memory.notify import MemoryNotifyAdapter, MemoryNotifyHub
from jobchain_conformance import NotifyAdapterSuite
from jobchain_conformance.suites import notify_channels, notify_instances


class PrivateBrokerNotify(MemoryNotifyAdapter):
    """Bug (a): ignores the shared hub; publishes reach only this adapter's own listeners."""

    def __init__(self, *, hub):
        super().__init__()


class NoResubscribeNotify(MemoryNotifyAdapter):
    """Bug (b): after a lost connection it keeps its listeners but never subscribes again."""

    def _connection_lost(self):
        pass


def notify_suite(adapter_class):
    class Suite(NotifyAdapterSuite):
        @pytest.fixture(autouse=True)
        def _short_timeouts(self, monkeypatch):
            monkeypatch.setattr(notify_channels, "DELIVERY_TIMEOUT", 0.2)
            monkeypatch.setattr(notify_instances, "RECONNECT_TIMEOUT", 0.4)
            monkeypatch.setattr(notify_instances, "POLL_INTERVAL", 0.1)

        @pytest.fixture
        def hub(self):
            return MemoryNotifyHub()

        @pytest.fixture
        def notify_adapter_factory(self, hub):
            async def open_adapter():
                return adapter_class(hub=hub)

            return open_adapter

        @pytest.fixture
        async def notify_adapter(self, notify_adapter_factory) -> AsyncIterator[MemoryNotifyAdapter]:
            adapter = await notify_adapter_factory()
            yield adapter
            await adapter.close()

        @pytest.fixture
        def interrupt_connection(self, hub):
            async def interrupt(adapter):
                hub.interrupt(adapter)

            return interrupt

    return Suite


TestCorrectNotify = notify_suite(MemoryNotifyAdapter)
TestPrivateBroker = notify_suite(PrivateBrokerNotify)
TestNoResubscribe = notify_suite(NoResubscribeNotify)
'''

# variant class → cases that must fail against it (and pass against the correct control).
MUST_FAIL = {
    "TestPrivateBroker": [
        "test_job_scheduled_published_on_one_adapter_reaches_a_listener_on_another",
        "test_chain_completed_published_on_one_adapter_reaches_a_listener_on_another",
        "test_ownership_loss_published_on_one_adapter_reaches_a_listener_on_another",
        "test_a_publish_reaches_listeners_on_both_adapters_once_each",
        "test_a_commit_completing_many_chains_reaches_listeners_on_another_adapter",
        "test_unsubscribing_on_one_adapter_keeps_the_other_adapters_listener",
        "test_closing_one_adapter_keeps_the_other_adapters_listeners",
        "test_a_wake_hint_provided_on_one_adapter_is_consumed_on_another",
        "test_closing_the_adapter_that_provided_a_wake_hint_keeps_it_for_the_others",
        "test_listeners_hear_again_after_an_interruption",
        "test_a_wake_up_after_reconnecting_reaches_a_listener_registered_before_exactly_once",
        "test_publishing_reaches_other_adapters_again_after_an_interruption",
        "test_a_listener_added_after_an_interruption_hears_once_reconnected",
        "test_an_unsubscribe_during_an_interruption_holds_after_reconnecting",
    ],
    "TestNoResubscribe": [
        "test_listeners_hear_again_after_an_interruption",
        "test_a_wake_up_after_reconnecting_reaches_a_listener_registered_before_exactly_once",
        "test_an_unsubscribe_during_an_interruption_holds_after_reconnecting",
    ],
}
CONTROL = {"TestPrivateBroker": "TestCorrectNotify", "TestNoResubscribe": "TestCorrectNotify"}

# Each variant passes everything a single adapter can check: that is the blind spot.
SINGLE_ADAPTER_MIXINS = (
    "JobScheduledChannelTests",
    "ChainCompletedChannelTests",
    "OwnershipLostChannelTests",
    "ListenerLifecycleTests",
    "WakeHintTests",
    "NotifyLifecycleTests",
)


class _Recorder:
    """A pytest plugin object collecting every phase report of the inner run."""

    def __init__(self) -> None:
        self.outcomes: dict[tuple[str, str], set[str]] = {}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        _, cls, name = report.nodeid.split("::")
        self.outcomes.setdefault((cls, name.split("[")[0]), set()).add(report.outcome)


# One worker runs the inner session once (a module fixture runs again on every worker).
pytestmark = pytest.mark.xdist_group("catches_notify_bugs")


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], set[str]]:
    """Run the notify suite once, in-process, against every variant; (class, case) → outcomes."""
    root = tmp_path_factory.mktemp("notify_variants")
    (root / "pytest.ini").write_text(INI)
    (root / "test_notify_variants.py").write_text(BROKEN_ADAPTERS)
    recorder = _Recorder()
    args = [
        "-q",
        "-p",
        "no:cacheprovider",
        "-p",
        "no:unraisableexception",
        "--import-mode=importlib",
        f"--rootdir={root}",
        "-c",
        str(root / "pytest.ini"),
    ]
    exit_code = pytest.main([*args, str(root)], plugins=[recorder])
    assert exit_code in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED), (
        f"inner run ended with {exit_code!r}"
    )
    return recorder.outcomes


def _failed(outcomes: dict[tuple[str, str], set[str]], cls: str, name: str) -> bool:
    assert (cls, name) in outcomes, f"{cls}::{name} did not run; was the case renamed?"
    return "failed" in outcomes[(cls, name)]


@pytest.mark.parametrize(
    ("variant", "case"), [(variant, case) for variant, cases in MUST_FAIL.items() for case in cases]
)
def test_broken_variant_fails_the_named_case(
    outcomes: dict[tuple[str, str], set[str]], variant: str, case: str
) -> None:
    assert _failed(outcomes, variant, case), f"the suite let {variant} pass {case}"
    assert not _failed(outcomes, CONTROL[variant], case), f"{case} fails on the correct adapter too"


def test_the_correct_adapter_passes_the_whole_notify_suite(
    outcomes: dict[tuple[str, str], set[str]],
) -> None:
    ran = {name for cls, name in outcomes if cls == "TestCorrectNotify"}
    failing = sorted(name for name in ran if "failed" in outcomes[("TestCorrectNotify", name)])
    skipped = sorted(name for name in ran if "skipped" in outcomes[("TestCorrectNotify", name)])
    assert failing == []
    assert skipped == [], "the in-process adapter declares every ability and provides every hook"


@pytest.mark.parametrize("variant", sorted(MUST_FAIL))
def test_broken_variants_pass_every_single_adapter_case(
    outcomes: dict[tuple[str, str], set[str]], variant: str
) -> None:
    # Without the cases above, each variant would pass the suite: they are the only guard.
    from jobchain_conformance.suites import notify_channels, notify_wake_hints

    single = {
        name
        for module in (notify_channels, notify_wake_hints)
        for mixin in SINGLE_ADAPTER_MIXINS
        if hasattr(module, mixin)
        for name in vars(getattr(module, mixin))
        if name.startswith("test_")
    }
    assert len(single) >= 25
    failing = sorted(name for name in single if _failed(outcomes, variant, name))
    assert failing == []
