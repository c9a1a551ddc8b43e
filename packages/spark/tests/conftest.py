"""Fixtures of the jobchain-spark tests: one local Spark session, SQLite files, a PostgreSQL schema.

Spark runs ``local[2,3]``: two cores, and a failed task is retried up to three times (plain
``local[N]`` never retries, which would hide the retry behaviour under test). The tests
directory goes on PYTHONPATH before the session starts so Spark's Python workers can import
the test job types (``sparkkit``) by reference, as an application's workers import its own.
"""

from __future__ import annotations

import asyncio
import os
import socket
import sys
import uuid
from collections.abc import Iterator
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


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    from pyspark.sql import SparkSession

    from jobchain_spark import register

    session = (
        SparkSession.builder.master("local[2,3]")
        .appName("jobchain-spark-tests")
        .config("spark.driver.memory", "512m")
        .config("spark.ui.enabled", "false")
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


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    """A migrated, empty SQLite state file of this test alone."""
    from sparkkit import migrate

    url = f"sqlite:///{tmp_path / 'jobchain.db'}"
    asyncio.run(migrate(url))
    return url


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


@pytest.fixture
def postgres_url(postgres_base_url: str) -> Iterator[str]:
    """A migrated schema of this test alone on the shared server, dropped afterwards."""
    import psycopg
    from sparkkit import migrate

    schema = f"jc_spark_{uuid.uuid4().hex[:10]}"
    sep = "&" if "?" in postgres_base_url else "?"
    url = f"{postgres_base_url}{sep}schema={schema}"
    conninfo = postgres_base_url.split("?")[0]
    with psycopg.connect(conninfo, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    asyncio.run(migrate(url))
    yield url
    with psycopg.connect(conninfo, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA "{schema}" CASCADE')


@pytest.fixture(params=["sqlite", "postgres"])
def state_url(request: pytest.FixtureRequest) -> str:
    """A migrated, empty state of this test alone, on each backend Spark reads."""
    return str(request.getfixturevalue(f"{request.param}_url"))
