"""Bulk rows for the history-scale and long-run phases: one INSERT … SELECT generate_series each.

The rows look like what the worker leaves behind (root jobs of ``bench.noop``, chain id = id);
writing them through the client would take longer than the whole benchmark.
"""

from __future__ import annotations

import psycopg
from common import pg_url

_COLUMNS = (
    "id, chain_id, type_name, chain_type_name, chain_index, status, created_at, scheduled_at, "
    "attempt, last_attempt_at, lease_generation, completed_at, completed_by"
)


def insert_history(db: str, schema: str, rows: int) -> None:
    """``rows`` completed jobs, created over the past ``rows`` milliseconds before a day ago."""
    sql = f"""
        INSERT INTO {schema}.jobchain_job ({_COLUMNS})
        SELECT u, u, 'bench.noop', 'bench.noop', 0, 'completed', t, t, 1, t, 1, t, 'history'
        FROM (
            SELECT md5('history' || i)::uuid AS u,
                   now() - interval '1 day' - (%(rows)s - i) * interval '1 millisecond' AS t
            FROM generate_series(1, %(rows)s) AS i
        ) AS s
    """
    with psycopg.connect(pg_url(db), autocommit=True) as conn:
        conn.execute(sql, {"rows": rows})  # type: ignore[arg-type]
        conn.execute(f"VACUUM ANALYZE {schema}.jobchain_job")  # type: ignore[arg-type]
        conn.execute("CHECKPOINT")


def insert_pending(db: str, schema: str, rows: int) -> None:
    """``rows`` pending jobs, eligible now, in creation order."""
    sql = f"""
        INSERT INTO {schema}.jobchain_job (
            id, chain_id, type_name, chain_type_name, chain_index, status, created_at, scheduled_at
        )
        SELECT u, u, 'bench.noop', 'bench.noop', 0, 'pending', t, t
        FROM (
            SELECT md5('pending' || i)::uuid AS u,
                   now() - (%(rows)s - i) * interval '1 microsecond' AS t
            FROM generate_series(1, %(rows)s) AS i
        ) AS s
    """
    with psycopg.connect(pg_url(db), autocommit=True) as conn:
        conn.execute(sql, {"rows": rows})  # type: ignore[arg-type]
        conn.execute("CHECKPOINT")
