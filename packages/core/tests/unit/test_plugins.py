"""Plugin loading, the (scheme, role) registry and URL → adapter resolution.

Fake backend distributions are real ones: a ``*.dist-info`` folder with an ``entry_points.txt``
and a plugin module, put on ``sys.path`` so importlib.metadata finds them like any install.
"""

from __future__ import annotations

import importlib
import sys
import textwrap
from collections.abc import Callable, Iterator, Sequence
from importlib.metadata import entry_points
from pathlib import Path

import pluggy
import pytest

from jobchain.connect_backends import (
    DEFAULT_STATE_URL,
    NOTIFY_URL_ENV,
    STATE_URL_ENV,
    open_notify,
    open_state,
    resolve_notify_url,
    resolve_state_url,
)
from jobchain.contracts.notify import NotifyAdapter
from jobchain.contracts.observe import NoopObserver, Observer
from jobchain.errors import (
    BackendConflictError,
    BackendUnavailableError,
    InvalidArgumentError,
    InvalidURLError,
    UnknownSchemeError,
)
from jobchain.memory.factories import forget_shared_adapters
from jobchain.memory.notify import MemoryNotifyAdapter
from jobchain.plugins import BackendRegistry, BackendSpec, hookimpl
from jobchain.plugins import register as register_globally
from jobchain.plugins import reset as reset_plugins
from jobchain.plugins.manager import (
    collect_observers,
    get_plugin_manager,
    load_plugins,
)
from jobchain.plugins.registry import RegisteredBackend
from jobchain.url import BackendURL

MEMORY_NOTIFY_FACTORY = "jobchain.memory.factories:open_notify_adapter"

InstallFake = Callable[[str, str, str, "str | None"], None]


def fake_spec(distribution: str, scheme: str = "fakeq", factory: str = MEMORY_NOTIFY_FACTORY) -> BackendSpec:
    return BackendSpec(scheme=scheme, role="notify", distribution=distribution, factory=factory)


def plugin_source(distribution: str, scheme: str = "fakeq") -> str:
    return f"""
        from jobchain.plugins import BackendSpec, hookimpl

        @hookimpl
        def jobchain_backends():
            return [BackendSpec(scheme={scheme!r}, role="notify", distribution={distribution!r},
                                factory={MEMORY_NOTIFY_FACTORY!r})]
    """


@pytest.fixture
def install_fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[InstallFake]:
    """Install a fake distribution: (name, entry-point name, module, module source or None)."""
    modules: list[str] = []

    def install(distribution: str, ep_name: str, module: str, source: str | None) -> None:
        root = tmp_path / distribution
        info = root / f"{distribution.replace('-', '_')}-1.0.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {distribution}\nVersion: 1.0\n")
        (info / "entry_points.txt").write_text(f"[jobchain]\n{ep_name} = {module}\n")
        if source is not None:
            (root / f"{module}.py").write_text(textwrap.dedent(source))
        monkeypatch.syspath_prepend(str(root))
        importlib.invalidate_caches()
        modules.append(module)

    yield install
    for module in modules:
        sys.modules.pop(module, None)


@pytest.fixture
def fresh_plugins() -> Iterator[None]:
    """Start and end with no cached plugin manager, registry or shared memory adapters."""
    reset_plugins()
    forget_shared_adapters()
    yield
    reset_plugins()
    forget_shared_adapters()


class TestEntryPoints:
    def test_core_declares_the_memory_plugin_as_an_entry_point(self) -> None:
        (memory,) = [ep for ep in entry_points(group="jobchain") if ep.name == "memory"]
        assert memory.value == "jobchain.memory.plugin"
        assert memory.dist is not None
        assert memory.dist.name == "jobchain"

    def test_memory_plugin_is_loaded_through_its_entry_point(self) -> None:
        loaded = load_plugins()
        source = loaded.sources["memory"]
        assert source.via_entry_point
        assert source.distribution == "jobchain"
        assert source.module == "jobchain.memory.plugin"
        assert loaded.manager.get_plugin("memory") is sys.modules["jobchain.memory.plugin"]

    def test_third_party_distribution_is_found(self, install_fake: InstallFake) -> None:
        install_fake("jobchain-fake-a", "fake", "jobchain_fake_a_plugin", plugin_source("jobchain-fake-a"))
        registry = BackendRegistry.from_plugins(load_plugins())
        assert registry.lookup("fakeq", "notify").distribution == "jobchain-fake-a"
        assert registry.lookup("memory", "notify").distribution == "jobchain"

    def test_same_entry_point_name_from_two_distributions_is_a_conflict(
        self, install_fake: InstallFake
    ) -> None:
        # pluggy's own loader would silently skip the second "fake"; ours must see both.
        install_fake("jobchain-fake-a", "fake", "jobchain_fake_a_plugin", plugin_source("jobchain-fake-a"))
        install_fake("jobchain-fake-b", "fake", "jobchain_fake_b_plugin", plugin_source("jobchain-fake-b"))
        loaded = load_plugins()
        assert {"fake", "fake@jobchain-fake-b"} <= set(loaded.sources)
        with pytest.raises(BackendConflictError) as info:
            BackendRegistry.from_plugins(loaded)
        assert "jobchain-fake-a" in str(info.value)
        assert "jobchain-fake-b" in str(info.value)

    def test_broken_distribution_loses_only_its_own_schemes(self, install_fake: InstallFake) -> None:
        install_fake("jobchain-broken", "broken", "jobchain_broken_missing_module", None)
        loaded = load_plugins()
        (failure,) = [f for f in loaded.failures if f.name == "broken"]
        assert failure.distribution == "jobchain-broken"
        registry = BackendRegistry.from_plugins(loaded)
        assert registry.lookup("memory", "state").distribution == "jobchain"
        with pytest.raises(UnknownSchemeError, match="jobchain_broken_missing_module"):
            registry.lookup("brokenq", "notify")

    def test_hookimpl_matching_no_spec_fails_check_pending(self, install_fake: InstallFake) -> None:
        source = """
            from jobchain.plugins import hookimpl

            @hookimpl
            def jobchain_backend():  # misspelled: no such hook
                return []
        """
        install_fake("jobchain-typo", "typo", "jobchain_typo_plugin", source)
        with pytest.raises(pluggy.PluginValidationError, match="jobchain_backend"):
            load_plugins()


class TestPluginManager:
    def test_built_once_per_process_until_reset(self, fresh_plugins: None) -> None:
        first = get_plugin_manager()
        assert get_plugin_manager() is first
        reset_plugins()
        assert get_plugin_manager() is not first

    def test_observers_are_collected_from_every_plugin(self) -> None:
        observer = NoopObserver()

        class ObserverPlugin:
            @hookimpl
            def jobchain_observers(self) -> Sequence[Observer]:
                return [observer]

        pm = load_plugins().manager
        pm.register(ObserverPlugin())
        assert collect_observers(pm) == [observer]


class TestConflicts:
    def test_two_specs_for_one_pair_name_both_distributions(self) -> None:
        registry = BackendRegistry()
        registry.register(fake_spec("jobchain-fake-a"))
        with pytest.raises(BackendConflictError) as info:
            registry.register(fake_spec("jobchain-fake-b", factory="other.module:open_notify_adapter"))
        message = str(info.value)
        assert "fakeq://" in message
        assert "jobchain-fake-a" in message
        assert "jobchain-fake-b" in message
        assert registry.lookup("fakeq", "notify").distribution == "jobchain-fake-a"  # unchanged

    def test_same_scheme_for_the_other_role_is_no_conflict(self) -> None:
        registry = BackendRegistry()
        registry.register(fake_spec("jobchain-fake-a"))
        registry.register(
            BackendSpec(scheme="fakeq", role="state", distribution="jobchain-fake-b", factory="m:f")
        )
        assert registry.schemes("state") == ["fakeq"]

    def test_identical_declarations_are_not_a_conflict(self) -> None:
        registry = BackendRegistry([RegisteredBackend(fake_spec("jobchain-fake-a"), "plugin 'x'")])
        registry.register(fake_spec("jobchain-fake-a"))
        assert len(registry.entries()) == 1

    def test_pluggy_plugins_claiming_one_pair_conflict(self) -> None:
        class PluginA:
            @hookimpl
            def jobchain_backends(self) -> Sequence[BackendSpec]:
                return [fake_spec("jobchain-fake-a")]

        class PluginB:
            @hookimpl
            def jobchain_backends(self) -> Sequence[BackendSpec]:
                return [fake_spec("jobchain-fake-b", factory="b.notify:open")]

        loaded = load_plugins()
        loaded.manager.register(PluginA(), name="a")
        loaded.manager.register(PluginB(), name="b")
        with pytest.raises(BackendConflictError) as info:
            BackendRegistry.from_plugins(loaded)
        assert "jobchain-fake-a (plugin 'a'" in str(info.value)
        assert "jobchain-fake-b (plugin 'b'" in str(info.value)

    def test_plugin_returning_non_specs_is_refused(self) -> None:
        class Sloppy:
            @hookimpl
            def jobchain_backends(self) -> object:
                return ["redis://"]

        loaded = load_plugins()
        loaded.manager.register(Sloppy(), name="sloppy")
        with pytest.raises(InvalidArgumentError, match="plugin 'sloppy'"):
            BackendRegistry.from_plugins(loaded)

    async def test_global_register_conflicting_with_memory(self, fresh_plugins: None) -> None:
        with pytest.raises(BackendConflictError) as info:
            register_globally(
                BackendSpec(scheme="memory", role="notify", distribution="jobchain-test", factory="m:f")
            )
        assert "jobchain-test" in str(info.value)
        assert "jobchain (plugin 'memory'" in str(info.value)


class TestUnknownScheme:
    @pytest.fixture
    def registry(self) -> BackendRegistry:
        return BackendRegistry.from_plugins(load_plugins())

    @pytest.mark.parametrize("scheme", ["redis", "rediss"])
    def test_names_the_distribution_to_install(self, scheme: str) -> None:
        registry = BackendRegistry()
        registry.register(BackendSpec(scheme="memory", role="notify", distribution="jobchain", factory="m:f"))
        with pytest.raises(UnknownSchemeError) as info:
            registry.lookup(scheme, "notify")
        message = str(info.value)
        assert "pip install" in message
        assert "jobchain-redis" in message
        assert "installed notify schemes: memory://" in message

    @pytest.mark.parametrize(
        ("scheme", "distribution"), [("postgresql", "jobchain-postgres"), ("sqlite", "jobchain-sqlite")]
    )
    def test_state_schemes_name_their_distribution(self, scheme: str, distribution: str) -> None:
        with pytest.raises(UnknownSchemeError, match=distribution):
            BackendRegistry().lookup(scheme, "state")

    def test_wrong_role_says_which_role_the_scheme_serves(self) -> None:
        with pytest.raises(UnknownSchemeError, match="redis:// is a notify backend, not a state backend"):
            BackendRegistry().lookup("redis", "state")

    def test_unheard_of_scheme_lists_installed_ones(self, registry: BackendRegistry) -> None:
        with pytest.raises(UnknownSchemeError) as info:
            registry.lookup("mongodb", "state")
        assert "mongodb://" in str(info.value)
        assert "memory://" in str(info.value)
        assert "pip install" not in str(info.value)

    async def test_open_state_with_unknown_scheme_hides_the_password(self, fresh_plugins: None) -> None:
        with pytest.raises(UnknownSchemeError) as info:
            await open_state("mongodb://admin:s3cr3t@db/app")
        assert "s3cr3t" not in str(info.value)


class TestLazyFactories:
    async def test_missing_module_names_the_distribution(self) -> None:
        registry = BackendRegistry()
        registry.register(fake_spec("jobchain-fake-a", factory="jobchain_fake_a_not_installed.notify:open"))
        with pytest.raises(BackendUnavailableError) as info:
            await registry.open(BackendURL.parse("fakeq://h"), "notify")
        assert "pip install jobchain-fake-a" in str(info.value)
        assert "jobchain_fake_a_not_installed" in str(info.value)

    async def test_missing_driver_inside_the_factory_names_the_distribution(
        self, install_fake: InstallFake
    ) -> None:
        source = """
            async def open_notify_adapter(url):
                import some_driver_that_is_not_installed  # noqa: F401
        """
        install_fake("jobchain-fake-a", "unused", "jobchain_fake_a_notify", source)
        registry = BackendRegistry()
        registry.register(fake_spec("jobchain-fake-a", factory="jobchain_fake_a_notify:open_notify_adapter"))
        with pytest.raises(
            BackendUnavailableError, match=r"some_driver_that_is_not_installed.*jobchain-fake-a"
        ):
            await registry.open(BackendURL.parse("fakeq://h"), "notify")

    async def test_missing_attribute(self) -> None:
        registry = BackendRegistry()
        registry.register(fake_spec("jobchain-fake-a", factory="jobchain.memory.factories:no_such_factory"))
        with pytest.raises(BackendUnavailableError, match="no callable 'no_such_factory'"):
            await registry.open(BackendURL.parse("fakeq://h"), "notify")

    async def test_sync_factory_is_refused(self) -> None:
        registry = BackendRegistry()
        registry.register(fake_spec("jobchain-fake-a", factory="builtins:repr"))
        with pytest.raises(InvalidArgumentError, match="must be an async function"):
            await registry.open(BackendURL.parse("fakeq://h"), "notify")


class TestBackendSpec:
    @pytest.mark.parametrize(
        "changes",
        [
            {"scheme": "Redis"},
            {"scheme": "redis+hiredis"},
            {"scheme": ""},
            {"role": "cache"},
            {"distribution": ""},
            {"factory": "no_colon"},
            {"factory": ":attr"},
            {"factory": "module:"},
        ],
    )
    def test_invalid_declarations_are_refused(self, changes: dict[str, str]) -> None:
        fields = {
            "scheme": "redis",
            "role": "notify",
            "distribution": "jobchain-redis",
            "factory": "m:f",
            **changes,
        }
        with pytest.raises(InvalidArgumentError):
            BackendSpec(**fields)  # type: ignore[arg-type]  # role is deliberately not a Role sometimes


class TestConnectBackends:
    def test_state_url_precedence(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.delenv(STATE_URL_ENV, raising=False)
        assert (
            resolve_state_url()
            == BackendURL.parse(DEFAULT_STATE_URL)
            == BackendURL.parse("sqlite:///jobchain.db")
        )
        monkeypatch.setenv(STATE_URL_ENV, "   ")
        assert resolve_state_url().scheme == "sqlite"
        monkeypatch.setenv(STATE_URL_ENV, "memory://from-env")
        assert resolve_state_url().host == "from-env"
        assert resolve_state_url("memory://explicit").host == "explicit"

    def test_state_cannot_be_none(self) -> None:
        with pytest.raises(InvalidURLError, match="only valid for notify"):
            resolve_state_url("none")

    def test_notify_url_precedence(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.delenv(NOTIFY_URL_ENV, raising=False)
        assert resolve_notify_url() is None
        monkeypatch.setenv(NOTIFY_URL_ENV, "redis://cache:6379/0")
        assert resolve_notify_url() == BackendURL.parse("redis://cache:6379/0")
        assert resolve_notify_url("none") is None
        monkeypatch.setenv(NOTIFY_URL_ENV, "none")
        assert resolve_notify_url() is None

    async def test_open_notify_none_and_unset(
        self, monkeypatch: pytest.MonkeyPatch, fresh_plugins: None
    ) -> None:
        monkeypatch.delenv(NOTIFY_URL_ENV, raising=False)
        assert await open_notify() is None
        assert await open_notify("none") is None

    async def test_memory_notify_is_shared_only_by_name(self, fresh_plugins: None) -> None:
        shared = await open_notify("memory://shared")
        assert isinstance(shared, NotifyAdapter)
        assert await open_notify(BackendURL.parse("memory://shared")) is shared
        assert await open_notify("memory://other") is not shared
        fresh = await open_notify("memory://")
        assert fresh is not shared
        assert await open_notify("memory://") is not fresh

    async def test_closed_shared_adapter_is_replaced(self, fresh_plugins: None) -> None:
        shared = await open_notify("memory://shared")
        assert shared is not None
        await shared.close()
        again = await open_notify("memory://shared")
        assert again is not shared
        assert isinstance(again, MemoryNotifyAdapter)
        assert not again.closed

    async def test_memory_state_is_shared_only_by_name(self, fresh_plugins: None) -> None:
        shared = await open_state("memory://shared")
        assert await open_state("memory://shared") is shared
        assert await open_state("memory://") is not await open_state("memory://")

    async def test_closed_shared_state_is_replaced(self, fresh_plugins: None) -> None:
        shared = await open_state("memory://shared")
        await shared.close()
        assert await open_state("memory://shared") is not shared

    @pytest.mark.parametrize(
        "url", ["memory://name/path", "memory://name:1234", "memory://u@name", "memory://?x=1"]
    )
    async def test_memory_urls_take_only_a_name(self, url: str, fresh_plugins: None) -> None:
        with pytest.raises(InvalidURLError, match="only an optional name"):
            await open_notify(url)

    async def test_registered_spec_is_served(self, fresh_plugins: None) -> None:
        register_globally(fake_spec("jobchain-test", scheme="fakemem"))
        adapter = await open_notify("fakemem://")
        assert isinstance(adapter, MemoryNotifyAdapter)

    async def test_factory_of_the_wrong_role_is_caught(self, fresh_plugins: None) -> None:
        register_globally(
            BackendSpec(
                scheme="fakemem", role="state", distribution="jobchain-test", factory=MEMORY_NOTIFY_FACTORY
            )
        )
        with pytest.raises(InvalidArgumentError, match="does not implement StateAdapter"):
            await open_state("fakemem://")
