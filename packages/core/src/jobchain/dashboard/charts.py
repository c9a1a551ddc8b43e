"""Geometry of the inline SVG drawings: the throughput chart and a chain's blocker graph.

Only numbers and plain labels are computed here; the templates draw them, and Jinja escapes
every label (a job type name is user data).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, timedelta
from typing import Final

from jobchain.entities import Chain, Job
from jobchain.stats import ThroughputBucket

CHART_WIDTH: Final = 1240
CHART_HEIGHT: Final = 200
LEFT, RIGHT, TOP, BOTTOM = 44, 8, 10, 26


@dataclass(frozen=True, slots=True)
class Bar:
    x: float
    width: float
    completed_y: float
    completed_h: float
    failed_y: float
    failed_h: float
    title: str


@dataclass(frozen=True, slots=True)
class Tick:
    at: float
    label: str


@dataclass(frozen=True, slots=True)
class ThroughputChart:
    width: int
    height: int
    plot_left: int
    plot_bottom: int
    plot_right: int
    bars: list[Bar]
    x_ticks: list[Tick]
    y_ticks: list[Tick]
    completed: int
    failed: int


def _nice_max(value: int) -> int:
    """The smallest of 1, 2 or 5 times a power of ten that is at least ``value`` (at least 1)."""
    scale = 1
    while True:
        for step in (1, 2, 5):
            if step * scale >= value:
                return step * scale
        scale *= 10


def throughput_chart(buckets: Sequence[ThroughputBucket], step: timedelta) -> ThroughputChart:
    """Stacked bars (completed below, failed above) per bucket, with time and count ticks."""
    plot_w = CHART_WIDTH - LEFT - RIGHT
    plot_h = CHART_HEIGHT - TOP - BOTTOM
    bottom = TOP + plot_h
    top_value = _nice_max(max((b.completed + b.failed for b in buckets), default=0))
    slot = plot_w / max(len(buckets), 1)
    bars: list[Bar] = []
    x_ticks: list[Tick] = []
    every = max(1, round(timedelta(minutes=15) / step)) if step > timedelta(0) else 1
    for i, bucket in enumerate(buckets):
        x = LEFT + i * slot
        done_h = plot_h * bucket.completed / top_value
        fail_h = plot_h * bucket.failed / top_value
        start = bucket.start.astimezone(UTC)
        bars.append(
            Bar(
                x=round(x + slot * 0.1, 2),
                width=round(max(slot * 0.8, 1.0), 2),
                completed_y=round(bottom - done_h, 2),
                completed_h=round(done_h, 2),
                failed_y=round(bottom - done_h - fail_h, 2),
                failed_h=round(fail_h, 2),
                title=f"{start:%H:%M} UTC: {bucket.completed} completed, {bucket.failed} failed",
            )
        )
        if i % every == 0:
            x_ticks.append(Tick(round(x, 2), f"{start:%H:%M}"))
    y_ticks = [Tick(round(bottom - plot_h * part / 2, 2), f"{top_value * part / 2:g}") for part in range(3)]
    return ThroughputChart(
        width=CHART_WIDTH,
        height=CHART_HEIGHT,
        plot_left=LEFT,
        plot_bottom=bottom,
        plot_right=CHART_WIDTH - RIGHT,
        bars=bars,
        x_ticks=x_ticks,
        y_ticks=y_ticks,
        completed=sum(b.completed for b in buckets),
        failed=sum(b.failed for b in buckets),
    )


# ---------------------------------------------------------------- blocker graph

NODE_W: Final = 220
NODE_H: Final = 44
GAP: Final = 14
COLUMNS: Final = (10, 330, 650)
GRAPH_WIDTH: Final = COLUMNS[2] + NODE_W + 10
MAX_NODES: Final = 40
"""Per column; more are summed up in a "+N more" line."""


@dataclass(frozen=True, slots=True)
class Node:
    x: int
    y: int
    label: str
    detail: str
    status: str
    href: str
    current: bool = False


@dataclass(frozen=True, slots=True)
class Edge:
    path: str
    kind: str  # "blocks" (a blocker chain to the job it blocks) or "continues" (job to next job)


@dataclass(slots=True)
class BlockerGraph:
    width: int = GRAPH_WIDTH
    height: int = NODE_H + 20
    nodes: list[Node] = field(default_factory=list)
    edges: list[Edge] = field(default_factory=list)
    more: list[Tick] = field(default_factory=list)


def _y(index: int) -> int:
    return 10 + index * (NODE_H + GAP)


def _curve(x1: int, y1: int, x2: int, y2: int) -> str:
    middle = (x1 + x2) // 2
    return f"M {x1} {y1} C {middle} {y1}, {middle} {y2}, {x2} {y2}"


def blocker_graph(
    base: str, jobs: Sequence[Job], blockers: dict[str, list[Chain]], dependents: Sequence[Job]
) -> BlockerGraph:
    """Three columns: the chains blocking this chain's jobs → its jobs in order → jobs it blocks."""
    graph = BlockerGraph()
    shown_jobs = list(jobs[:MAX_NODES])
    row_of_job: dict[str, int] = {}
    for row, job in enumerate(shown_jobs):
        row_of_job[job.id] = row
        graph.nodes.append(
            Node(
                x=COLUMNS[1],
                y=_y(row),
                label=f"#{job.chain_index} {job.type_name}",
                detail=f"{job.status.value} · …{job.id[-8:]}",
                status=job.status.value,
                href=f"#job-{job.id}",
                current=True,
            )
        )
        if row:
            top = _y(row - 1) + NODE_H
            graph.edges.append(Edge(f"M {COLUMNS[1] + 24} {top} L {COLUMNS[1] + 24} {_y(row)}", "continues"))
    blocker_rows: dict[str, int] = {}
    for job in shown_jobs:
        for chain in blockers.get(job.id, []):
            known = blocker_rows.get(chain.id)
            if known is None:
                row = blocker_rows[chain.id] = len(blocker_rows)
                if row >= MAX_NODES:
                    continue
                graph.nodes.append(
                    Node(
                        x=COLUMNS[0],
                        y=_y(row),
                        label=chain.type_name
                        if chain.last.type_name == chain.type_name
                        else f"{chain.type_name} / {chain.last.type_name}",
                        detail=f"{chain.status.value} · …{chain.id[-8:]}",
                        status=chain.status.value,
                        href=f"{base}/chains/{chain.id}",
                    )
                )
            else:
                row = known
            if row < MAX_NODES:
                graph.edges.append(
                    Edge(
                        _curve(
                            COLUMNS[0] + NODE_W,
                            _y(row) + NODE_H // 2,
                            COLUMNS[1],
                            _y(row_of_job[job.id]) + NODE_H // 2,
                        ),
                        "blocks",
                    )
                )
    if shown_jobs:
        last_y = _y(len(shown_jobs) - 1) + NODE_H // 2
        for row, job in enumerate(dependents[:MAX_NODES]):
            graph.nodes.append(
                Node(
                    x=COLUMNS[2],
                    y=_y(row),
                    label=job.chain_type_name if job.is_root else f"{job.chain_type_name} / {job.type_name}",
                    detail=f"{job.status.value} · …{job.chain_id[-8:]}",
                    status=job.status.value,
                    href=f"{base}/chains/{job.chain_id}",
                )
            )
            graph.edges.append(
                Edge(_curve(COLUMNS[1] + NODE_W, last_y, COLUMNS[2], _y(row) + NODE_H // 2), "blocks")
            )
    counts = (len(blocker_rows), len(jobs), len(dependents))
    for column, count in zip(COLUMNS, counts, strict=True):
        if count > MAX_NODES:
            graph.more.append(Tick(column, f"+{count - MAX_NODES} more"))
    rows = max(min(count, MAX_NODES) for count in counts)
    graph.height = _y(rows) + (20 if graph.more else 0)
    return graph


__all__ = ["BlockerGraph", "ThroughputChart", "blocker_graph", "throughput_chart"]
