"""Top errors by fingerprint, and periods down to minutes (issue 36, deliver 5).

- Spark's fingerprint (Spark SQL ``regexp_replace`` in the executors) and Python's
  (``jobchain.error_fingerprint``, which the dashboard uses) agree on a table of examples and
  on a batch of generated messages;
- 44 ``CardExpired`` failures whose messages differ only in the order ref are one group of 44
  in the report, on SQLite and PostgreSQL;
- ``--period 5m`` / ``minute`` over 30 minutes of history, and the activity chart draws bars
  when it has few periods.
"""

from __future__ import annotations

import asyncio
import random
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import sparkkit

from jobchain.connect_backends import open_state
from jobchain.error_fingerprint import MAX_FINGERPRINT, error_fingerprint, error_line
from jobchain_spark import SparkOptionError
from jobchain_spark.report import build_report
from jobchain_spark.report_output import write_report

pytestmark = [pytest.mark.spark, pytest.mark.timeout(900)]

T0 = sparkkit.T0
CARD = "CardExpired: card for order <id> expired on <n>"

EXAMPLES: list[tuple[str | None, str | None]] = [
    ("CardExpired", "card for order ORD-10442 expired on 11/2026"),
    ("KeyError", "'img'"),
    ("ValueError", 'bad input: missing field "sku"'),
    ("ValueError", "can't parse 'x' (it's odd)"),
    ("", "job 0193a4b2-1c3d-7e4f-8a9b-0c1d2e3f4a5b lost its lease"),
    ("", "job 0193A4B2-1C3D-7E4F-8A9B-0C1D2E3F4A5B lost"),
    ("TimeoutError", "upstream took longer than 30 s"),
    ("TimeoutError", "upstream took longer than 30s"),
    ("RuntimeError", "at 2026-11-30T08:15:00Z, retry at 2026-11-30 08:16"),
    ("RuntimeError", "deadline 2026-11-30T08:15:00.123+01:00 passed"),
    ("MemoryError", "object at 0x7f3a9c0e1d20"),
    ("", "sha 9f86d081e4 mismatch, expected deadbeef"),
    ("", "user42 sent 3.5 MB to 10.0.0.1:8080"),
    ("", "rows 1,204 of 10,000 at 08:15:07"),
    ("HTTPError", "HTTP 503 from https://api.example.com/v2/orders/77"),
    ("Http404Error", "no page 12"),
    ("", "  \n\n   first   line\t here  \nsecond line 42"),
    ("", "\r\n\x0b\f tabs\tand\x0bvertical\ftabs 7\r\n"),
    ("StopIteration", ""),
    ("StopIteration", None),
    ("", ""),
    (None, None),
    (None, "   \n "),
    ("", "naïve café №7 ٣ 'ü' \U0001d7d81 emoji 🎉 42"),  # non-ASCII digits are kept, in both
    ("", "x_1 _2 a-1-b ab-- --9 'a'b 'c' \"d\"e \"f\""),
    ("", "'' \"\" '\"' \"'\" 'unterminated"),
    ("ValueError", "word " * 60),  # cut at 200 characters
    ("ValueError", "1 " * 150),  # cut after masking
    ("LongTypeName" * 20, "x"),
]


def _generated(count: int, seed: int = 36) -> list[tuple[str, str]]:
    """Messages drawn from the characters the rules care about (a fixed seed: reproducible)."""
    rng = random.Random(seed)
    pieces = [
        "order", "ORD-", "user", "0x", "-", "_", ".", ",", ":", "/", "'", '"', " ", "  ", "\t", "\n",
        "\r", "T", "Z", "+", "é", "٣", "🎉", "a", "f", "F", "g", "z", "0", "1", "9", "42", "2026-11-30",
        "08:15:00", "deadbeef", "0193a4b2-1c3d-7e4f-8a9b-0c1d2e3f4a5b", "can't", "<id>", "<n>",
    ]  # fmt: skip
    rows = []
    for _ in range(count):
        text = "".join(rng.choice(pieces) for _ in range(rng.randrange(0, 40)))
        rows.append((rng.choice(["", "ValueError", "E2"]), text))
    return rows


def test_spark_and_python_fingerprints_agree(spark: Any) -> None:
    from pyspark.sql import functions as sf

    from jobchain_spark.report_errors import example_column, fingerprint_column

    rows = [*EXAMPLES, *_generated(400)]
    frame = spark.createDataFrame(
        [(i, kind, message) for i, (kind, message) in enumerate(rows)], "i int, kind string, message string"
    )
    got = {
        r["i"]: (r["fingerprint"], r["example"])
        for r in frame.select(
            "i",
            fingerprint_column(sf.col("kind"), sf.col("message")).alias("fingerprint"),
            example_column(sf.col("kind"), sf.col("message")).alias("example"),
        ).collect()
    }
    expected = {
        i: (error_fingerprint(kind, message), error_line(kind, message))
        for i, (kind, message) in enumerate(rows)
    }
    differ = {i: (rows[i], got[i], expected[i]) for i in expected if got[i] != expected[i]}
    assert not differ, differ
    assert got[0][0] == CARD
    assert all(len(fingerprint) <= MAX_FINGERPRINT for fingerprint, _ in got.values())


def at(seconds: float) -> datetime:
    start: datetime = T0
    return start + timedelta(seconds=seconds)


CARDS = [f"card for order ORD-{10_400 + n} expired on {1 + n % 12}/2026" for n in range(44)]


async def _seed_cards(url: str) -> None:
    """44 ``resize`` jobs over 30 minutes (one every 40 s), each failing for good on its first
    attempt with ``CardExpired``, whose message names its order; two ``KeyError`` failures on
    other keys, and one job with no history (a legacy traceback naming its order)."""
    state = await open_state(url)
    try:
        for n, message in enumerate(CARDS):
            [job] = await sparkkit.create(state, "resize", 1, at(40 * n))
            await sparkkit.run(
                state,
                job,
                started=at(40 * n + 1),
                finished=at(40 * n + 5),
                fail_with=message,
                error_type="CardExpired",
                give_up=True,
            )
        for n, key in enumerate(("sku", "price")):
            [job] = await sparkkit.create(
                state, "send_email", 1, at(60 + n), input={"to": "a", "subject": "b"}
            )
            await sparkkit.run(
                state,
                job,
                started=at(70 + n),
                finished=at(75 + n),
                fail_with=f"'{key}'",
                error_type="KeyError",
            )
        [legacy] = await sparkkit.create(state, "notify_step", 1, at(100))
        traceback = (
            'Traceback (most recent call last):\n  File "app.py", line 9, in charge\n'
            "CardExpired: card for order ORD-99 expired on 3/2026"
        )
        await sparkkit.fail(state, legacy, at=at(1700), error=traceback)
    finally:
        await state.close()


def test_44_card_errors_differing_in_their_order_ref_are_one_group_of_44(
    spark: Any, state_url: str, tmp_path: Path
) -> None:
    asyncio.run(_seed_cards(state_url))
    report = build_report(spark, url=state_url, period="hour", now=at(1800))
    errors = report.tables["errors"]
    cards = errors[(errors["error_type"] == "CardExpired") & (errors["type_name"] == "resize")]
    assert len(cards) == 1, errors.to_string()
    [card] = cards.to_dict("records")
    assert (card["fingerprint"], card["jobs"], card["attempts"], card["messages"]) == (CARD, 44, 44, 44)
    assert card["example"] == f"CardExpired: {CARDS[-1]}"  # one real message: the latest
    assert pd.Timestamp(card["last_seen_at"]) == pd.Timestamp(at(40 * 43 + 5)).tz_localize(None)
    rows = [
        (r.type_name, r.error_type, r.fingerprint, r.jobs, r.attempts, r.messages)
        for r in errors.itertuples()
    ]
    assert rows == [
        ("resize", "CardExpired", CARD, 44, 44, 44),
        ("send_email", "KeyError", "KeyError: '<v>'", 2, 2, 2),
        ("notify_step", "CardExpired", CARD, 1, 0, 1),  # no history: its traceback's exception line
    ]
    assert errors.iloc[2]["example"] == "CardExpired: card for order ORD-99 expired on 3/2026"

    html = write_report(report, tmp_path / "out").read_text()
    assert "card for order &lt;id&gt; expired on &lt;n&gt;" in html
    assert "Distinct messages" in html


def test_a_report_per_5_minutes_and_per_minute_over_30_minutes(
    spark: Any, sqlite_url: str, tmp_path: Path
) -> None:
    asyncio.run(_seed_cards(sqlite_url))
    per_5m = build_report(spark, url=sqlite_url, period="5m", now=at(1800))
    assert per_5m.period == "5m"
    started = {
        (r.type_name, (r.period - pd.Timestamp(T0).tz_localize(None)).total_seconds()): r.started
        for r in per_5m.tables["throughput"].itertuples()
    }
    # One resize job every 40 s from 0 to 1,720 s: 8 in each of [0, 300), [300, 600) ... (the
    # 5-minute buckets start at multiples of 300 s since midnight).
    assert {p: n for (t, p), n in started.items() if t == "resize"} == {
        0.0: 8, 300.0: 7, 600.0: 8, 900.0: 7, 1200.0: 8, 1500.0: 6
    }  # fmt: skip
    failed = {(r.type_name, r.period.minute): r.failed for r in per_5m.tables["throughput"].itertuples()}
    assert failed[("notify_step", 25)] == 1  # failed at 1,700 s: 28 min 20 s, in the 25-minute bucket
    assert sum(per_5m.tables["throughput"]["failed"]) == 45
    html = write_report(per_5m, tmp_path / "out").read_text()
    assert "Activity per 5 minutes" in html
    assert "<th rowspan='2'>Period (5 min)</th>" in html or "Period (5 min)</th>" in html
    assert "2024-03-01 00:25" in html  # the last bucket, to the minute

    per_minute = build_report(spark, url=sqlite_url, period="minute", now=at(1800))
    resize = per_minute.tables["throughput"]
    resize = resize[resize["type_name"] == "resize"]
    assert resize["started"].sum() == 44
    assert len(resize) == 29  # jobs start in minutes 0 to 28; two at most per minute
    assert resize["started"].max() == 2
    assert set(per_minute.tables["timing"]["period"].dt.second) == {0}

    with pytest.raises(SparkOptionError, match="whole minutes that divide a day"):
        build_report(spark, url=sqlite_url, period="7m")
