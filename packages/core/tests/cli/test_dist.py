"""``make dist`` builds wheels that work on their own: the core and SQLite wheels, installed into
a fresh virtualenv (their dependencies from the configured index, nothing from the workspace),
run ``python -m jobchain.demo`` from a directory outside the repository.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from .venvs import REPO, TIMEOUT, clean_env, fresh_venv, pip_install, run

DISTRIBUTIONS = (
    "jobchain",
    "jobchain_conformance",
    "jobchain_nats",
    "jobchain_postgres",
    "jobchain_redis",
    "jobchain_spark",
    "jobchain_sqlite",
)

pytestmark = [pytest.mark.xdist_group("install"), pytest.mark.timeout(TIMEOUT + 60)]


def test_the_wheels_of_make_dist_install_into_a_fresh_venv_and_run_the_demo(tmp_path: Path) -> None:
    env = clean_env()
    # An outer `make test` passes its flags (a jobserver, -k) through the environment.
    make_env = {k: v for k, v in env.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    dist = tmp_path / "dist"
    # The Makefile's own target, into a folder of this test's (the shared dist/ stays as it is),
    # with this interpreter's pip; -o: never reinstall .venv from inside a test.
    make = ["make", "--no-print-directory", "-o", ".venv/.installed", "dist"]
    run([*make, f"DIST={dist}", f"BIN={Path(sys.executable).parent}"], REPO, make_env)
    wheels = {path.name.split("-", 1)[0]: path for path in dist.glob("*.whl")}
    assert sorted(wheels) == sorted(DISTRIBUTIONS), sorted(path.name for path in dist.iterdir())

    venv = tmp_path / "venv"
    python = fresh_venv(venv, env)
    pip_install(python, [str(wheels["jobchain"]), str(wheels["jobchain_sqlite"])], tmp_path, env)

    elsewhere = tmp_path / "elsewhere"  # outside the repository: no checkout on sys.path
    elsewhere.mkdir()
    out = run([str(python), "-m", "jobchain.demo"], elsewhere, env)
    assert "state: SqliteStateAdapter" in out, out
    assert "chain completed: demo.place_order -> demo.pack -> demo.ship" in out, out
    assert (elsewhere / "jobchain.db").is_file()

    where = run(
        [str(python), "-c", "import jobchain, jobchain_sqlite; print(jobchain.__file__)"], elsewhere, env
    )
    assert where.startswith(str(venv)), (
        f"the demo must run on the installed wheel, not the workspace: {where}"
    )
    # pip records where an installed distribution came from: a wheel file, not a folder.
    [origin] = venv.glob("lib/python*/site-packages/jobchain-*.dist-info/direct_url.json")
    assert '"archive_info"' in origin.read_text(encoding="utf-8")
