"""The soak's figures: the per-chain line files joined, binned by 10 s, summarised and rendered.

``Joiner`` reads the starter's lines (chain id, COMMIT sent, COMMIT done) and the worker's
(chain id, handler start, handler end) as they grow; ``analyse`` turns its bins and the 10 s
samples into a row per minute and the drift between the first and the last window;
``render`` writes the markdown page.
"""

from __future__ import annotations

from array import array
from pathlib import Path
from typing import Any

from common import percentile

SAMPLE_EVERY = 10.0
"""Seconds per bin and between two samples of the database and the processes."""


class Joiner:
    """Reads the starter's and the worker's line files as they grow and joins them by chain id."""

    def __init__(self, starts: Path, handled: Path, t0: float) -> None:
        self.t0 = t0
        self._files = [starts.open(), handled.open()]
        self._rest = ["", ""]
        self.sent: dict[str, float] = {}  # chains started, not yet handled
        self.early: dict[str, float] = {}  # handled before the starter's line was read
        self.started: dict[int, int] = {}  # per 10 s window
        self.completed: dict[int, int] = {}
        self.latency: dict[int, array[float]] = {}  # per 10 s window of handler start, seconds
        self.commit: array[float] = array("d")

    def _lines(self, i: int) -> list[list[str]]:
        text = self._rest[i] + self._files[i].read()
        lines = text.split("\n")
        self._rest[i] = lines.pop()
        return [line.split() for line in lines if line]

    def _latency(self, t_start: float, t_sent: float) -> None:
        window = int((t_start - self.t0) // SAMPLE_EVERY)
        self.latency.setdefault(window, array("d")).append(t_start - t_sent)

    def poll(self) -> None:
        for chain, sent, done in self._lines(0):
            t_sent = float(sent)
            window = int((t_sent - self.t0) // SAMPLE_EVERY)
            self.started[window] = self.started.get(window, 0) + 1
            if len(self.commit) < 200_000:
                self.commit.append(float(done) - t_sent)
            early = self.early.pop(chain, None)
            if early is None:
                self.sent[chain] = t_sent
            else:
                self._latency(early, t_sent)
        for chain, start, end in self._lines(1):
            t_start = float(start)
            window = int((float(end) - self.t0) // SAMPLE_EVERY)
            self.completed[window] = self.completed.get(window, 0) + 1
            t_sent_or_none = self.sent.pop(chain, None)
            if t_sent_or_none is None:
                self.early[chain] = t_start
            else:
                self._latency(t_start, t_sent_or_none)

    def close(self) -> None:
        for f in self._files:
            f.close()


def _range_stats(joiner: Joiner, lo: float, hi: float) -> dict[str, Any]:
    """Started/completed per second and latency percentiles (ms) over the 10 s windows in [lo, hi)."""
    windows = range(int(lo // SAMPLE_EVERY), int(-(-hi // SAMPLE_EVERY)))
    span = max(1e-9, hi - lo)
    lat: array[float] = array("d")
    for w in windows:
        lat.extend(joiner.latency.get(w, array("d")))
    ms = {
        k: percentile(lat, q) * 1000 if lat else None for k, q in (("p50", 0.5), ("p99", 0.99), ("max", 1.0))
    }
    return {
        "started_per_s": sum(joiner.started.get(w, 0) for w in windows) / span,
        "completed_per_s": sum(joiner.completed.get(w, 0) for w in windows) / span,
        "latency_n": len(lat),
        **{f"latency_{k}_ms": v for k, v in ms.items()},
    }


def _samples_in(samples: list[dict[str, Any]], lo: float, hi: float) -> list[dict[str, Any]]:
    # The sample at t covers the 10 s before it.
    return [s for s in samples if lo < s["t"] <= hi + 1]


def _at(samples: list[dict[str, Any]], t: float) -> dict[str, Any] | None:
    """The sample taken nearest to ``t``."""
    return min(samples, key=lambda s: abs(s["t"] - t)) if samples else None


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def analyse(run: dict[str, Any]) -> dict[str, Any]:
    joiner: Joiner = run.pop("joiner")
    seconds = run["seconds"]
    load = [s for s in run["samples"] if s["phase"] in ("start", "load")]
    minutes = []
    for m in range(int(-(-seconds // 60))):
        lo, hi = m * 60, min((m + 1) * 60, seconds)
        row: dict[str, Any] = {"minute": m + 1, **_range_stats(joiner, lo, hi)}
        inside = _samples_in(load, lo, hi)
        if inside:
            last = inside[-1]
            keys = ("pending", "n_dead_tup", "table_bytes", "index_bytes", "worker_rss", "n_tup_del")
            row |= {k: last.get(k) for k in keys}
            row["machine_busy"] = _mean([s["machine_busy"] for s in inside])
        minutes.append(row)
    span = int(max(SAMPLE_EVERY, min(300, (seconds // 4) // SAMPLE_EVERY * SAMPLE_EVERY)))
    ends = {"first": (0, span), "last": (seconds - span, seconds)}
    drift: dict[str, Any] = {"window_s": span}
    for name, (lo, hi) in ends.items():
        stats = _range_stats(joiner, lo, hi)
        inside = _samples_in(load, lo, hi)
        rss = [s["worker_rss"] for s in inside if "worker_rss" in s]
        start, end = _at(load, lo), _at(load, hi)
        drift[name] = {
            "completed_per_s": stats["completed_per_s"],
            "latency_p99_ms": stats["latency_p99_ms"],
            "latency_p50_ms": stats["latency_p50_ms"],
            "worker_rss_mean": _mean(rss),
            "n_dead_tup_mean": _mean([s["n_dead_tup"] for s in inside]),
            # Table + indexes at the window's end, and how fast they grew within it.
            "size_bytes": end["table_bytes"] + end["index_bytes"] if end else None,
            "growth_bytes_per_min": (
                (end["table_bytes"] + end["index_bytes"] - start["table_bytes"] - start["index_bytes"])
                / max(1e-9, end["t"] - start["t"])
                * 60
                if start and end and end["t"] > start["t"]
                else None
            ),
        }
    keys = ("completed_per_s", "latency_p99_ms", "latency_p50_ms", "worker_rss_mean", "n_dead_tup_mean")
    for key in (*keys, "size_bytes"):
        a, b = drift["first"][key], drift["last"][key]
        drift[f"{key}_ratio"] = b / a if a and b is not None else None
    size = [s["table_bytes"] + s["index_bytes"] for s in load]
    if size:
        half = [s["table_bytes"] + s["index_bytes"] for s in load if s["t"] >= seconds / 2]
        drift["size"] = {
            "first_bytes": size[0],
            "last_bytes": size[-1],
            "peak_bytes": max(size),
            "growth_bytes": size[-1] - size[0],
            "second_half_growth_bytes": half[-1] - half[0] if half else None,
            "deleted_rows": load[-1]["n_tup_del"] - load[0]["n_tup_del"],
            "table_last": load[-1]["table_bytes"],
            "index_last": load[-1]["index_bytes"],
        }
        drift["peak_dead_tup"] = max(s["n_dead_tup"] for s in load)
        drift["peak_pending"] = max(s["pending"] for s in load)
    overall = _range_stats(joiner, 0, seconds)
    commit = joiner.commit
    overall["commit_ms_p50"] = percentile(commit, 0.5) * 1000 if commit else None
    return {"minutes": minutes, "drift": drift, "overall": overall}


def _fmt(value: Any, scale: float = 1.0, digits: int = 0) -> str:
    if value is None:
        return "-"
    return f"{value / scale:,.{digits}f}"


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def render(result: dict[str, Any]) -> str:
    """The markdown page of one run (the JSON the run writes: info, minutes, drift, overall, indexes)."""
    mb = 2**20
    info, d, o = result["info"], result["drift"], result["overall"]
    s = d.get("size", {})
    cap = info["capacity"]
    machine = info["machine"]
    cpus = int(machine["cpus"])
    busy = _mean([r["machine_busy"] for r in result["minutes"] if r.get("machine_busy") is not None])
    shared = float(machine["load_before"].split()[0]) > cpus / 2 or (busy or 0) > 0.9
    indexes = result.get("indexes", {})
    lines = [
        f"# Soak {info['name']}",
        "",
        f"{info['seconds']} s of steady load at {info['load']:.0%} of measured capacity on a private "
        f"PostgreSQL {info['server']['version']} cluster; one worker process ({info['worker']}), one starter "
        f"process (absolute schedule, the chains due every {info['tick_s']} s in one transaction).",
        "",
        f"- server settings: {', '.join(f'{k}={v}' for k, v in info['server']['settings'].items())}",
        f"- capacity: {cap['rate']:,.0f} jobs/s over a backlog of {cap['jobs']:,} "
        f"({cap.get('seconds', 0):.1f} s, {cap.get('cpu_per_1000', 0):.2f} CPU s per 1,000 jobs)"
        if cap.get("rate")
        else f"- capacity: not measured (rate set by BENCH_SOAK_RATE) — {cap}",
        f"- offered: {info['rate']:,.0f} chains/s; starter reached {info['starter']['rate']:,.0f}/s, "
        f"schedule lag p99 {info['starter']['lag_ms']['p99']:.1f} ms, "
        f"max {info['starter']['lag_ms']['max']:.1f} ms, "
        f"mean {info['starter']['mean_batch']:.1f} chains per transaction, COMMIT p50 "
        f"{info['starter']['commit_ms']['p50']:.2f} ms",
        f"- retention: {info['retention']}",
        f"- machine: {info['machine']['cpus']} CPUs, {info['machine']['memory_gib']} GiB; load before "
        f"{info['machine']['load_before']}, after {info['machine']['load_after']}; commit {info['git']}",
        "- latency: handler start minus the moment the starter sent COMMIT (includes the commit itself)",
        f"- job table indexes during the run ({len(indexes)}): {', '.join(sorted(indexes))}",
        *(
            [
                f"- **disturbed run**: the machine was shared (load average {machine['load_before']} "
                f"before on {cpus} CPUs, {busy or 0:.0%} busy during the load); capacity and latency are "
                "below what this machine gives alone, drift ratios compare like with like only as far "
                "as the other load stayed steady"
            ]
            if shared
            else []
        ),
        "",
        "## Per minute",
        "",
        "| min | started/s | completed/s | p50 ms | p99 ms | max ms | pending | dead tup | table MB | "
        "index MB | worker RSS MB | machine busy |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in result["minutes"]:
        lines.append(
            f"| {r['minute']} | {_fmt(r['started_per_s'])} | {_fmt(r['completed_per_s'])} | "
            f"{_fmt(r['latency_p50_ms'], digits=1)} | {_fmt(r['latency_p99_ms'], digits=1)} | "
            f"{_fmt(r['latency_max_ms'], digits=1)} | {_fmt(r.get('pending'))} | "
            f"{_fmt(r.get('n_dead_tup'))} | "
            f"{_fmt(r.get('table_bytes'), mb, 1)} | {_fmt(r.get('index_bytes'), mb, 1)} | "
            f"{_fmt(r.get('worker_rss'), mb, 1)} | {_fmt(r.get('machine_busy'), 0.01)} % |"
        )
    first, last, w = d["first"], d["last"], d["window_s"]
    lines += [
        "",
        f"## Drift: first {w} s vs last {w} s",
        "",
        "| figure | first | last | last / first |",
        "|---|---:|---:|---:|",
        f"| completed/s | {_fmt(first['completed_per_s'])} | {_fmt(last['completed_per_s'])} | "
        f"{_ratio(d['completed_per_s_ratio'])} |",
        f"| p50 wake-to-start ms | {_fmt(first['latency_p50_ms'], digits=1)} | "
        f"{_fmt(last['latency_p50_ms'], digits=1)} | {_ratio(d['latency_p50_ms_ratio'])} |",
        f"| p99 wake-to-start ms | {_fmt(first['latency_p99_ms'], digits=1)} | "
        f"{_fmt(last['latency_p99_ms'], digits=1)} | {_ratio(d['latency_p99_ms_ratio'])} |",
        f"| worker RSS MB (mean) | {_fmt(first['worker_rss_mean'], mb, 1)} | "
        f"{_fmt(last['worker_rss_mean'], mb, 1)} | {_ratio(d['worker_rss_mean_ratio'])} |",
    ]
    lines += [
        f"| dead tuples (mean) | {_fmt(first['n_dead_tup_mean'])} | {_fmt(last['n_dead_tup_mean'])} | "
        f"{_ratio(d['n_dead_tup_mean_ratio'])} |",
        f"| job table + indexes MB (at window end) | {_fmt(first['size_bytes'], mb, 1)} | "
        f"{_fmt(last['size_bytes'], mb, 1)} | {_ratio(d['size_bytes_ratio'])} |",
        f"| growth of table + indexes, MB/min | {_fmt(first['growth_bytes_per_min'], mb, 2)} | "
        f"{_fmt(last['growth_bytes_per_min'], mb, 2)} | |",
    ]
    if s:
        lines += [
            "",
            f"Table + indexes grew {_fmt(s['growth_bytes'], mb, 1)} MB over the run "
            f"(second half: {_fmt(s['second_half_growth_bytes'], mb, 1)} MB; peak "
            f"{_fmt(s['peak_bytes'], mb, 1)} MB). Peak dead tuples {d['peak_dead_tup']:,}, peak pending "
            f"{d['peak_pending']:,}. Retention deleted {s['deleted_rows']:,} job rows during the load.",
        ]
    lines += [
        "",
        f"Whole run: {o['completed_per_s']:,.0f} completed/s, wake-to-start p50 "
        f"{_fmt(o['latency_p50_ms'], digits=1)} ms, p99 {_fmt(o['latency_p99_ms'], digits=1)} ms, "
        f"max {_fmt(o['latency_max_ms'], digits=1)} ms "
        f"over {o['latency_n']:,} jobs; unmatched lines {info['unmatched']}.",
        "",
    ]
    return "\n".join(lines)
