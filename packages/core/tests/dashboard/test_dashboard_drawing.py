"""The drawings' geometry and the template filters, without a server."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from jobchain.dashboard.charts import MAX_NODES, blocker_graph, throughput_chart
from jobchain.dashboard.formatting import MAX_JSON_CHARS, ago, duration, first_line, pretty_json, short
from jobchain.entities import Chain, Job, JobStatus
from jobchain.stats import ThroughputBucket

T0 = datetime(2026, 11, 26, 7, 0, tzinfo=UTC)


def _job(n: int, *, chain: int | None = None, index: int = 0, status: JobStatus = JobStatus.PENDING) -> Job:
    job_id = f"00000000-0000-7000-8000-{n:012d}"
    chain_id = f"00000000-0000-7000-8000-{(n if chain is None else chain):012d}"
    return Job(
        id=job_id,
        chain_id=chain_id,
        type_name=f"t{index}",
        chain_type_name="t0",
        chain_index=index,
        status=status,
        input=None,
        created_at=T0,
        scheduled_at=T0,
    )


def test_throughput_bars_stack_failures_on_completions_on_a_round_scale() -> None:
    buckets = [
        ThroughputBucket(start=T0 + timedelta(minutes=m), completed=c, failed=f)
        for m, (c, f) in enumerate([(0, 0), (30, 10), (7, 0)])
    ]
    chart = throughput_chart(buckets, timedelta(minutes=1))
    assert [t.label for t in chart.y_ticks] == ["0", "25", "50"]  # 40 rounds up to 50
    empty, busy, light = chart.bars
    assert empty.completed_h == empty.failed_h == 0
    assert busy.completed_h == pytest.approx(3 * busy.failed_h)  # 30 vs 10 on the same scale
    assert busy.failed_y + busy.failed_h == busy.completed_y  # failures drawn on top
    assert busy.completed_y + busy.completed_h == chart.plot_bottom
    assert light.completed_h < busy.completed_h
    assert busy.title == "07:01 UTC: 30 completed, 10 failed"
    assert (chart.completed, chart.failed) == (37, 10)
    assert [t.label for t in chart.x_ticks] == ["07:00"]


def test_throughput_chart_of_nothing_draws_an_empty_axis() -> None:
    chart = throughput_chart([], timedelta(minutes=1))
    assert chart.bars == []
    assert [t.label for t in chart.y_ticks] == ["0", "0.5", "1"]


def test_blocker_graph_links_blockers_jobs_and_dependents() -> None:
    jobs = [_job(1, index=0, status=JobStatus.COMPLETED), _job(2, chain=1, index=1)]
    blocker_root = _job(7, status=JobStatus.RUNNING)
    blockers = {
        jobs[0].id: [Chain(blocker_root, blocker_root)],
        jobs[1].id: [Chain(blocker_root, blocker_root)],
    }
    dependent = _job(9)
    graph = blocker_graph("/ops", jobs, blockers, [dependent])
    hrefs = [node.href for node in graph.nodes]
    assert hrefs == [
        f"#job-{jobs[0].id}",
        f"#job-{jobs[1].id}",
        f"/ops/chains/{blocker_root.id}",  # drawn once, though it blocks both jobs
        f"/ops/chains/{dependent.chain_id}",
    ]
    assert [edge.kind for edge in graph.edges] == ["continues", "blocks", "blocks", "blocks"]
    assert graph.nodes[2].detail == "running · …00000007"
    assert graph.more == []


def test_blocker_graph_sums_up_what_does_not_fit() -> None:
    root = _job(1)
    dependents = [_job(100 + n) for n in range(MAX_NODES + 5)]
    graph = blocker_graph("", [root], {}, dependents)
    assert len(graph.nodes) == 1 + MAX_NODES
    assert [tick.label for tick in graph.more] == ["+5 more"]


def test_filters_read_as_people_write() -> None:
    assert duration(timedelta(milliseconds=350)) == "350 ms"
    assert duration(timedelta(seconds=4.25)) == "4.2 s"
    assert duration(timedelta(seconds=185)) == "3 min 5 s"
    assert duration(timedelta(hours=2, minutes=10)) == "2 h 10 min"
    assert duration(timedelta(days=3, hours=4)) == "3 d 4 h"
    assert duration(None) == "—"
    assert ago(T0 - timedelta(seconds=5), T0) == "5.0 s ago"
    assert ago(T0 + timedelta(minutes=3), T0) == "in 3 min 0 s"
    assert short("01a216ac-e307-7e20-b593-99d1a9bb15fc") == "…a9bb15fc"
    assert first_line("ValueError: bad\n  more") == "ValueError: bad"
    assert pretty_json({"a": "<b>"}) == '{\n  "a": "<b>"\n}'  # escaping is the template's job
    cut = pretty_json("x" * (MAX_JSON_CHARS + 10))
    assert cut.endswith("(12 more characters)")
