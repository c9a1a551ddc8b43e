"""Installing from the repository, as getting-started.md tells a user to: a fresh virtualenv,
``pip install ./packages/core ./packages/sqlite`` (no editable installs, nothing from the
workspace's .venv), then the page's first example runs on the embedded default.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from .venvs import REPO, TIMEOUT, clean_env, fresh_venv, pip_install, run

PAGE = REPO / "docs" / "getting-started.md"
FENCE = re.compile(r"^```(\w+)[^\n]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)

# pip into a fresh venv and a first run: CPU-bound, and on a starved machine (8 CPU burners on
# 2 cores) past pytest-timeout's usual 120 s, so the subprocesses' own bound is the test's.
pytestmark = [pytest.mark.xdist_group("install"), pytest.mark.timeout(TIMEOUT + 60)]


def _blocks(language: str) -> list[str]:
    text = PAGE.read_text(encoding="utf-8")
    return [m.group(2) for m in FENCE.finditer(text) if m.group(1) == language]


def test_the_documented_install_from_the_repository_runs_the_first_example(tmp_path: Path) -> None:
    documented = [
        line.split("#", 1)[0].split()
        for block in _blocks("sh")
        for line in block.splitlines()
        if line.startswith("pip install ./packages/core")
    ]
    # The first install is the one the first example runs on; the later ones (PostgreSQL and
    # Redis for section 4) must at least name distributions that exist in the repository.
    assert documented[0] == ["pip", "install", "./packages/core", "./packages/sqlite"], documented
    for line in documented:
        for target in line[2:]:
            folder = target.strip("\"'").split("[", 1)[0]
            assert (REPO / folder / "pyproject.toml").is_file(), f"{line}: no distribution at {folder}"

    env = clean_env()
    venv = tmp_path / "venv"
    python = fresh_venv(venv, env)
    pip_install(python, documented[0][2:], REPO, env)

    backends = run([str(venv / "bin" / "jobchain"), "backends"], tmp_path, env)
    assert "sqlite://" in backends
    assert "jobchain-sqlite" in backends

    python_blocks = _blocks("python")
    signup = next(b for b in python_blocks if b.startswith("# file: signup.py"))
    first = next(b for b in python_blocks if b.startswith("# runnable"))
    project = tmp_path / "project"
    project.mkdir()
    (project / "signup.py").write_text(signup, encoding="utf-8")
    (project / "first.py").write_text(first, encoding="utf-8")
    out = run([str(python), "first.py"], project, env | {"PYTHONPATH": str(project)})
    assert "completed after send_welcome" in out, out
    installed = run(
        [str(python), "-c", "import jobchain, jobchain_sqlite; print(jobchain.__file__)"], project, env
    )
    assert str(venv) in installed, "the example must run on the installed copy, not the workspace"
