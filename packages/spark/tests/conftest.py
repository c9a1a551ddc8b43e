"""Fixtures of the jobchain-spark tests: one local Spark session, SQLite files, a PostgreSQL schema.

Spark runs ``local[2,3]``: two cores, and a failed task is retried up to three times (plain
``local[N]`` never retries, which would hide the retry behaviour under test). The tests
directory goes on PYTHONPATH before the session starts so Spark's Python workers can import
the test job types (``sparkkit``) by reference, as an application's workers import its own.

Every test that uses the session carries the ``spark`` marker, which keeps it on the one
xdist worker that owns the JVM (the root conftest.py); collection fails for one that does not.
"""

from __future__ import annotations

import asyncio
import os
import socket
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

TESTS_DIR = str(Path(__file__).resolve().parent)
if TESTS_DIR not in sys.path:
    sys.path.insert(0, TESTS_DIR)
os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (TESTS_DIR, os.environ.get("PYTHONPATH")) if p)
os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
os.environ["PYSPARK_PYTHON"] = sys.executable
os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable

DEFAULT_POSTGRES_URL = "postgresql://postgres@127.0.0.1:5432/test"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "spark: runs a local Spark session (jobchain-spark)")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # Without the marker a test would share no JVM: it would start a session of its own on
    # whichever xdist worker it landed (two JVMs on two cores), outside the serial group.
    unmarked = [
        item.nodeid
        for item in items
        if "spark" in getattr(item, "fixturenames", ()) and item.get_closest_marker("spark") is None
    ]
    if unmarked:
        raise pytest.UsageError(
            "these tests use the Spark session without @pytest.mark.spark: " + ", ".join(unmarked)
        )


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    import sparkkit
    from pyspark.sql import SparkSession

    from jobchain_spark import register

    session = (
        SparkSession.builder.master("local[2,3]")
        .appName("jobchain-spark-tests")
        .config("spark.driver.memory", "512m")
        .config("spark.driver.extraJavaOptions", sparkkit.JVM_OPTIONS)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.default.parallelism", "4")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    yield session
    session.stop()


def _migrated_sqlite(folder: Path) -> str:
    from sparkkit import migrate

    url = f"sqlite:///{folder / 'jobchain.db'}"
    asyncio.run(migrate(url))
    return url


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    """A migrated, empty SQLite state file of this test alone."""
    return _migrated_sqlite(tmp_path)


def _in_ci() -> bool:
    return os.environ.get("CI", "").lower() == "true"


@pytest.fixture(scope="session")
def postgres_base_url() -> str:
    """The shared test server; skips locally, fails in CI when it is not reachable."""
    from jobchain.url import BackendURL

    url = os.environ.get("JOBCHAIN_TEST_POSTGRES_URL", "").strip() or DEFAULT_POSTGRES_URL
    parsed = BackendURL.parse(url)
    try:
        with socket.create_connection((parsed.host or "127.0.0.1", parsed.port or 5432), timeout=2):
            pass
    except OSError:
        reason = f"PostgreSQL not reachable at {parsed.host}:{parsed.port} (set JOBCHAIN_TEST_POSTGRES_URL)"
        if _in_ci():
            pytest.fail(f"{reason} (CI=true: a missing service fails the run)", pytrace=False)
        pytest.skip(reason)
    try:
        import jobchain_postgres.state  # noqa: F401 -- the adapter must be installed to seed and start
    except ImportError as exc:
        if _in_ci():
            pytest.fail(f"jobchain-postgres is not importable: {exc}", pytrace=False)
        pytest.skip(f"jobchain-postgres state adapter not available: {exc}")
    return url


@contextmanager
def _migrated_schema(base_url: str) -> Iterator[str]:
    """A migrated schema of its own on the shared server, dropped afterwards."""
    import psycopg
    from sparkkit import migrate

    schema = f"jc_spark_{uuid.uuid4().hex[:10]}"
    sep = "&" if "?" in base_url else "?"
    url = f"{base_url}{sep}schema={schema}"
    conninfo = base_url.split("?")[0]
    with psycopg.connect(conninfo, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    try:
        asyncio.run(migrate(url))
        yield url
    finally:
        with psycopg.connect(conninfo, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA "{schema}" CASCADE')


@pytest.fixture
def postgres_url(postgres_base_url: str) -> Iterator[str]:
    """A migrated schema of this test alone on the shared server, dropped afterwards."""
    with _migrated_schema(postgres_base_url) as url:
        yield url


@pytest.fixture(params=["sqlite", "postgres"])
def state_url(request: pytest.FixtureRequest) -> str:
    """A migrated, empty state of this test alone, on each backend Spark reads."""
    return str(request.getfixturevalue(f"{request.param}_url"))


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def module_state_url(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """A migrated, empty state shared by one module's tests, on each backend Spark reads: for a
    history that the module seeds once and its tests only read."""
    if request.param == "sqlite":
        yield _migrated_sqlite(tmp_path_factory.mktemp("state"))
        return
    with _migrated_schema(str(request.getfixturevalue("postgres_base_url"))) as url:
        yield url
