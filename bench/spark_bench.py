"""jobchain-spark scale figures: read rows/s, bulk-start chains/s, archive rows/s (PostgreSQL).

    .venv/bin/python bench/spark_bench.py --rows 1000000 [--url postgresql://postgres@127.0.0.1/test]

Uses a fresh schema, dropped at the end. Steps:

1. bulk start: ``start_chains`` over a DataFrame of ``--rows`` rows (one chain per row);
2. read: the ``jobchain`` data source (``noop`` sink, all columns) vs the client's own listing
   (``list_jobs`` pages of 500) over the same table;
3. archive: the chains are marked completed 40 days ago by one SQL UPDATE (a bench shortcut:
   running a million jobs through workers is not what is measured), then ``archive`` with
   ``older_than=30d`` copies, verifies and deletes them; rows/s counts chains + jobs written.

Prints one JSON line per figure.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
import uuid
from datetime import timedelta
from typing import Any

import psycopg
from pyspark.sql import SparkSession
from spark_bench_types import types  # bench/ is on sys.path: this script's own folder

from jobchain import JobTypes, connect
from jobchain.connect_backends import open_state
from jobchain_spark import register, start_chains
from jobchain_spark.archive import archive

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))


def _spark_env() -> None:
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    # Spark's Python workers import the job types by reference, as an application's workers would.
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (BENCH_DIR, os.environ.get("PYTHONPATH")) if p)


def emit(name: str, **values: Any) -> None:
    print(json.dumps({"figure": name, **values}), flush=True)


async def client_listing(url: str) -> int:
    client = await connect(url, notify="none", job_types=JobTypes())
    count, cursor = 0, None
    try:
        while True:
            page = await client.list_jobs(cursor=cursor, limit=500)
            count += len(page.items)
            cursor = page.next_cursor
            if cursor is None:
                return count
    finally:
        await client.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument(
        "--url",
        default=os.environ.get("JOBCHAIN_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"),
    )
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=100)
    args = parser.parse_args()
    schema = f"jc_bench_{uuid.uuid4().hex[:8]}"
    url = f"{args.url}?schema={schema}"
    with psycopg.connect(args.url, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    _spark_env()
    spark = (
        SparkSession.builder.master(args.master)
        .config("spark.driver.memory", "2g")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", str(args.partitions))
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    try:

        async def migrate() -> None:
            state = await open_state(url)
            await state.migrate()
            await state.close()

        asyncio.run(migrate())
        # Warm-up (not measured): 2,000 rows in small committed partitions, then ANALYZE, as a
        # table in service would have. Since the deduplication lookup stopped depending on
        # statistics this is no longer needed; it is kept so runs stay comparable with the
        # recorded figures.
        warm = spark.range(2000, numPartitions=40).selectExpr(
            "concat('warm-', id) AS order_id", "cast(id % 1000 AS int) AS amount"
        )
        start_chains(warm, url=url, job_type="process_order", job_types=types, key="order_id", batch_size=50)
        with psycopg.connect(args.url, autocommit=True) as conn:
            conn.execute(f'ANALYZE "{schema}".jobchain_job')
        df = spark.range(args.rows, numPartitions=args.partitions).selectExpr(
            "concat('order-', id) AS order_id", "cast(id % 1000 AS int) AS amount"
        )
        t = time.perf_counter()
        result = start_chains(
            df, url=url, job_type="process_order", job_types=types, key="order_id", batch_size=args.batch_size
        )
        elapsed = time.perf_counter() - t
        emit(
            "bulk_start",
            rows=args.rows,
            started=result.started,
            seconds=round(elapsed, 1),
            per_second=round(result.started / elapsed),
        )

        t = time.perf_counter()
        spark.read.format("jobchain").option("url", url).option(
            "partitions", args.partitions
        ).load().write.format("noop").mode("overwrite").save()
        spark_s = time.perf_counter() - t
        t = time.perf_counter()
        listed = asyncio.run(client_listing(url))
        client_s = time.perf_counter() - t
        emit(
            "read",
            rows=listed,
            spark_per_second=round(listed / spark_s),
            client_per_second=round(listed / client_s),
        )

        with psycopg.connect(args.url, autocommit=True) as conn:
            conn.execute(
                f"UPDATE \"{schema}\".jobchain_job SET status = 'completed', attempt = 1, "
                "completed_at = now() - interval '40 days'"
            )
        with tempfile.TemporaryDirectory() as root:
            t = time.perf_counter()
            done = archive(spark, url=url, to=root, older_than=timedelta(days=30), partitions=args.partitions)
            archive_s = time.perf_counter() - t
        rows = done.chains + done.jobs
        emit(
            "archive",
            chains=done.chains,
            rows_written=rows,
            deleted=done.deleted,
            seconds=round(archive_s, 1),
            rows_per_second=round(rows / archive_s),
        )
    finally:
        spark.stop()
        with psycopg.connect(args.url, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA "{schema}" CASCADE')


if __name__ == "__main__":
    main()
