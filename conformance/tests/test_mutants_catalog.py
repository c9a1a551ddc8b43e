"""The mutant catalogue: every broken variant names the cases that catch it, each says which
bug it plants, and ``docs/adapters/suite-mutants.md`` lists them as they are."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest


def _catalogue_module() -> ModuleType:
    # A sibling module: the tests run with --import-mode=importlib and no package here.
    path = Path(__file__).with_name("mutants.py")
    spec = importlib.util.spec_from_file_location("jobchain_suite_mutants", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


mutants = _catalogue_module()


@pytest.mark.parametrize("path", mutants.catches_modules(), ids=lambda path: path.stem)
def test_every_variant_names_the_cases_that_catch_it(path: Path) -> None:
    assert mutants.unlisted(path) == [], f"{path.name} defines variants no case is named against"


def test_every_variant_says_which_bug_it_plants() -> None:
    catalogue = mutants.catalogue()
    assert len(catalogue) >= 80
    assert [m.name for m in catalogue if not m.bug] == []
    assert [m.name for m in catalogue if not m.cases] == []


def test_the_documented_list_is_current() -> None:
    assert mutants.DOC.read_text() == mutants.render(mutants.catalogue()), (
        "docs/adapters/suite-mutants.md is stale: run `make suite-mutants-doc`"
    )
