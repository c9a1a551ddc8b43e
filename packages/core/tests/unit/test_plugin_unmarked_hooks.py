"""A plugin function named like a hook but lacking ``@hookimpl`` is a warning (issue 37).

pluggy registers only the functions carrying the project's hookimpl marker; before, a plugin
module whose ``jobchain_observers`` (or ``jobchain_backends``) lacked ``@hookimpl`` loaded
without a word and its hook simply never ran. The plugin here is a real module object
(``types.ModuleType``) reached through an entry point of a fake installed distribution, the
way every user plugin is loaded.
"""

from __future__ import annotations

import importlib
import logging
import sys
import types
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest

from jobchain.contracts.observe import NoopObserver, Observer
from jobchain.plugins import hookimpl
from jobchain.plugins.manager import collect_observers, load_plugins

LOGGER = "jobchain.plugins.manager"

Install = Callable[[str, types.ModuleType], None]


@pytest.fixture
def install_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Install]:
    """Declare ``module`` as the ``jobchain`` entry point ``ep_name`` of a fake distribution."""

    def install(ep_name: str, module: types.ModuleType) -> None:
        distribution = f"jobchain-{ep_name}"
        info = tmp_path / distribution / f"{distribution.replace('-', '_')}-1.0.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {distribution}\nVersion: 1.0\n")
        (info / "entry_points.txt").write_text(f"[jobchain]\n{ep_name} = {module.__name__}\n")
        monkeypatch.syspath_prepend(str(tmp_path / distribution))
        monkeypatch.setitem(sys.modules, module.__name__, module)
        importlib.invalidate_caches()

    yield install


SENTINEL = NoopObserver()


def _observers() -> Sequence[Observer]:
    return [SENTINEL]


def _unmarked_plugin(name: str) -> types.ModuleType:
    module = types.ModuleType(name)

    def jobchain_observers() -> Sequence[Observer]:
        return [SENTINEL]

    # A hook-named function without @hookimpl: pluggy skips it. A fresh function each time:
    # hookimpl() marks the function object itself, and another test marks _observers.
    module.jobchain_observers = jobchain_observers  # type: ignore[attr-defined]  # a plain module attribute
    module.helper = lambda: None  # type: ignore[attr-defined]  # not a hook name: no warning
    return module


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == LOGGER and r.levelno == logging.WARNING]


def test_hook_named_function_without_hookimpl_is_a_warning_naming_it(
    install_module: Install, caplog: pytest.LogCaptureFixture
) -> None:
    install_module("unmarked", _unmarked_plugin("jobchain_unmarked_plugin"))
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        loaded = load_plugins()
    assert "unmarked" in loaded.sources  # still registered: a warning, not an error
    (message,) = [m for m in _warnings(caplog) if "jobchain_unmarked_plugin" in m]
    assert "jobchain_observers" in message
    assert "@jobchain.plugins.hookimpl" in message
    assert "helper" not in message
    (unmarked,) = [u for u in loaded.unmarked_hooks if u.module == "jobchain_unmarked_plugin"]
    assert unmarked.function == "jobchain_observers"
    assert unmarked.plugin == "unmarked"
    assert unmarked.distribution == "jobchain-unmarked"
    assert SENTINEL not in collect_observers(loaded.manager)  # what the warning is about


def test_marked_hook_is_no_warning(install_module: Install, caplog: pytest.LogCaptureFixture) -> None:
    module = types.ModuleType("jobchain_marked_plugin")
    module.jobchain_observers = hookimpl(_observers)  # type: ignore[attr-defined]  # a plain module attribute
    install_module("marked", module)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        loaded = load_plugins()
    assert not [m for m in _warnings(caplog) if "jobchain_marked_plugin" in m]
    assert not [u for u in loaded.unmarked_hooks if u.module == "jobchain_marked_plugin"]
    assert SENTINEL in collect_observers(loaded.manager)


def test_built_in_plugins_have_no_unmarked_hooks() -> None:
    assert load_plugins().unmarked_hooks == ()


def test_jobchain_backends_names_the_unmarked_hook(install_module: Install) -> None:
    from click.testing import CliRunner

    from jobchain.cli import main
    from jobchain.plugins.manager import reset_plugin_manager
    from jobchain.plugins.registry import reset_registry

    install_module("unmarked", _unmarked_plugin("jobchain_unmarked_plugin"))
    reset_plugin_manager()
    reset_registry()
    try:
        result = CliRunner().invoke(main, ["backends"])
    finally:
        reset_plugin_manager()
        reset_registry()
    assert result.exit_code == 0, result.output
    assert "memory://" in result.stdout
    assert (
        "plugin 'unmarked' (jobchain_unmarked_plugin) from jobchain-unmarked: jobchain_observers has "
        "no @jobchain.plugins.hookimpl, so it never runs" in result.stderr
    ), result.stderr
