"""Turn the benchmark records into the results table (Markdown) and the chart (PNG)."""
# ruff: noqa: RUF001, E501 -- typographic dashes and signs on purpose; long table-format strings

from __future__ import annotations

import itertools
from collections import defaultdict
from pathlib import Path
from typing import Any

from common import Stat, percentile

PG_LIBS = ["jobchain-pg", "pgqueuer", "procrastinate"]
MB = 2**20


def fmt(value: float | None, digits: int = 0) -> str:
    if value is None:
        return "–"
    return f"{value:,.{digits}f}"


def cell(stat: Stat | None, digits: int = 0) -> str:
    if stat is None:
        return "–"
    if stat.n == 1:
        return fmt(stat.median, digits)
    return f"{fmt(stat.median, digits)} ({fmt(stat.low, digits)}–{fmt(stat.high, digits)})"


def ratio(a: Stat | None, b: Stat | None) -> str:
    if a is None or b is None or not b.median:
        return "–"
    return f"{a.median / b.median:.2f}×"


class Results:
    def __init__(self, records: list[dict[str, Any]]) -> None:
        self.records = records
        self.groups: dict[tuple[str, str, str], list[dict[str, Any]]] = defaultdict(list)
        for rec in records:
            self.groups[(rec["phase"], rec["lib"], rec["config"])].append(rec)

    def stat(self, phase: str, lib: str, config: str, key: str = "rate", scale: float = 1.0) -> Stat | None:
        values = [r[key] / scale for r in self.groups.get((phase, lib, config), []) if r.get(key) is not None]
        return Stat.of(values)

    def configs(self, phase: str, lib: str) -> list[str]:
        return [c for (p, name, c) in self.groups if p == phase and name == lib]

    def best(self, phase: str, lib: str) -> tuple[str, Stat | None]:
        options = [(c, self.stat(phase, lib, c)) for c in self.configs(phase, lib)]
        options = [(c, s) for c, s in options if s is not None]
        if not options:
            return "–", None
        return max(options, key=lambda item: item[1].median)


def _start_table(res: Results) -> list[str]:
    one_client = res.stat("ref", "pgbench", "insert-one-client")
    out = [
        "| start (chains/s, 1 client) | jobchain PostgreSQL | pgqueuer | procrastinate | jobchain ÷ pgqueuer "
        "| jobchain ÷ procrastinate | jobchain ÷ one-client INSERT ref | pgqueuer ÷ one-client INSERT ref "
        "| jobchain SQLite | jobchain in-process |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for config in ("single", "single autocommit", "batch 100", "batch 1000"):
        jc, pgq, pro = (res.stat("start", lib, config) for lib in PG_LIBS)
        if config == "single autocommit":  # the peers' one-at-a-time enqueue is one statement too
            pgq, pro = (res.stat("start", lib, "single") for lib in PG_LIBS[1:])
        sq, mem = res.stat("start", "jobchain-sqlite", config), res.stat("start", "jobchain-memory", config)
        label = {
            "single": "one per transaction",
            "single autocommit": "one per transaction, jobchain in autocommit (peers: as above)",
        }.get(config, f"batches of {config.split()[-1]}")
        single = config.startswith("single")
        out.append(
            f"| {label} | {cell(jc)} | {cell(pgq)} | {cell(pro)} | {ratio(jc, pgq)} | {ratio(jc, pro)} "
            f"| {ratio(jc, one_client) if single else '–'} | {ratio(pgq, one_client) if single else '–'} "
            f"| {cell(sq)} | {cell(mem)} |"
        )
    return out


def _process_table(res: Results) -> list[str]:
    _, pgq_best = res.best("process", "pgqueuer")
    _, pro_best = res.best("process", "procrastinate")
    skip = res.stat("ref", "pgbench", "skip-locked")
    out = [
        "| process N no-op jobs (see plan), 1 worker process | jobs/s | ÷ pgqueuer best | ÷ procrastinate best "
        "| ÷ SKIP LOCKED ref | worker CPU s / 1,000 jobs | server xacts / job | peak worker RSS MB | machine busy |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for lib in ("jobchain-pg", "pgqueuer", "procrastinate", "jobchain-sqlite", "jobchain-memory"):
        for config in res.configs("process", lib):
            rate = res.stat("process", lib, config)
            pg = lib in PG_LIBS
            out.append(
                f"| {lib} {config} | {cell(rate)} | {ratio(rate, pgq_best)} | {ratio(rate, pro_best)} "
                f"| {ratio(rate, skip) if pg else '–'} | {cell(res.stat('process', lib, config, 'cpu_per_1000'), 3)} "
                f"| {cell(res.stat('process', lib, config, 'xacts_per_job'), 2) if pg else '–'} "
                f"| {cell(res.stat('process', lib, config, 'peak_rss', MB))} "
                f"| {cell(res.stat('process', lib, config, 'machine_busy', 0.01))} % |"
            )
    return out


def _processes_table(res: Results) -> list[str]:
    """Issue 21 item 4: 1, 2 and 4 worker processes on one database, same total concurrency."""
    configs = res.configs("processes", "jobchain-pg")
    if not configs:
        return ["(not measured)"]
    single_config = "atomic c10 prefetch 10"
    single = res.stat("process", "jobchain-pg", single_config)
    control = res.stat("processes", "jobchain-pg", configs[0]) if configs[0].startswith("1 process") else None
    out = [
        "Every layout totals 10 handler slots and 10 prefetched jobs, atomic mode, on one database; the "
        "processes are released together and run until the table has no incomplete job "
        "(`bench/multiprocess.py`). jobs/s spans the first handler start to the last completion in any "
        "process; CPU is summed over the processes; server transactions exclude the orchestrator's polls.",
        "",
        f"| worker processes (jobchain PostgreSQL, atomic) | jobs/s | ÷ single-process row ({single_config}: "
        f"{cell(single)}) | ÷ 1 process in this harness | worker CPU s / 1,000 jobs, all processes | server xacts / job | jobs per process (first round) "
        "| peak RSS per process MB | machine busy |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for config in configs:
        rate = res.stat("processes", "jobchain-pg", config)
        recs = res.groups[("processes", "jobchain-pg", config)]
        spread = " / ".join(f"{jobs:,}" for jobs in recs[0]["per_process_jobs"])  # the first round's
        out.append(
            f"| {config} | {cell(rate)} | {ratio(rate, single)} | {ratio(rate, control)} "
            f"| {cell(res.stat('processes', 'jobchain-pg', config, 'cpu_per_1000'), 3)} "
            f"| {cell(res.stat('processes', 'jobchain-pg', config, 'xacts_per_job'), 2)} | {spread} "
            f"| {cell(res.stat('processes', 'jobchain-pg', config, 'peak_rss', MB))} "
            f"| {cell(res.stat('processes', 'jobchain-pg', config, 'machine_busy', 0.01))} % |"
        )
    return out


def _sync_table(res: Results) -> list[str]:
    """jobchain.sync next to the async client, same run (issue 20: a sync start costs <= 1.3x)."""
    out = [
        "| single start, own transaction (chains/s) | async client | jobchain.sync | sync cost ÷ async cost |",
        "|---|---|---|---|",
    ]
    for lib, name in (("jobchain-pg", "PostgreSQL"), ("jobchain-sqlite", "SQLite")):
        aio, sync = res.stat("start", lib, "single"), res.stat("start", lib, "single sync")
        if aio is not None or sync is not None:
            # Cost per start is 1 / rate: the sync façade's cost relative to the async one.
            out.append(f"| {name} | {cell(aio)} | {cell(sync)} | {ratio(aio, sync)} |")
    return out


def _sqlite_table(res: Results) -> list[str]:
    """The SQLite adapter next to the in-process one from the same run (issue 4 item 5)."""
    out = [
        "| jobchain SQLite and the in-process adapter, same run | SQLite | in-process | SQLite ÷ in-process |",
        "|---|---|---|---|",
    ]
    rows = [("start", c, f"start, {c} (chains/s)") for c in ("single", "batch 100", "batch 1000")]
    rows += [("process", c, f"process, {c} (jobs/s)") for c in res.configs("process", "jobchain-memory")]
    for phase, config, label in rows:
        sq, mem = res.stat(phase, "jobchain-sqlite", config), res.stat(phase, "jobchain-memory", config)
        if sq is not None or mem is not None:
            out.append(f"| {label} | {cell(sq)} | {cell(mem)} | {ratio(sq, mem)} |")
    return out


def _latency_rows(res: Results) -> list[tuple[str, str, list[float]]]:
    rows = []
    for (phase, lib, config), recs in res.groups.items():
        if phase == "latency":
            samples = [s for r in recs for s in r.get("samples_ms", [])]
            rows.append((lib, config, samples))
    return rows


def _latency_table(res: Results) -> list[str]:
    out = [
        "| wake-up latency, commit → handler start, idle worker | samples | p50 ms | p95 ms | p99 ms | max ms "
        "| machine busy |",
        "|---|---|---|---|---|---|---|",
    ]
    for lib, config, samples in _latency_rows(res):
        if not samples:
            continue
        p = [percentile(samples, q) for q in (0.5, 0.95, 0.99)]
        busy = res.stat("latency", lib, config, "machine_busy", 0.01)
        out.append(
            f"| {lib}, {config} | {len(samples):,} | {p[0]:.1f} | {p[1]:.1f} | {p[2]:.1f} | {max(samples):.1f} "
            f"| {cell(busy)} % |"
        )
    return out


def _wake_hints_table(res: Results) -> list[str]:
    rows = [(lib, config, recs[0]) for (p, lib, config), recs in res.groups.items() if p == "wake_hints"]
    if not rows:
        return ["(not measured)"]
    out = [
        "| 8 idle workers, chains started one at a time | chains | wake hints | acquisitions / job "
        "| empty / job | by woken workers / job | re-checks after own completion / job "
        "| hints granted / denied per job | state transactions / job | commit → handler p50 / p99 ms "
        "| machine busy |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for lib, config, r in rows:
        woken = r["acquire_per_job"] - r["after_own_completion_per_job"]
        tx = r.get("state_ops_per_job", {}).get("transaction")
        out.append(
            f"| {lib}, {config} | {r['n']:,} | {'on' if r['hints'] else 'off'} | {r['acquire_per_job']:.2f} "
            f"| {r['empty_per_job']:.2f} | {woken:.2f} | {r['after_own_completion_per_job']:.2f} "
            f"| {r['hints_granted_per_job']:.2f} / {r['hints_denied_per_job']:.2f} | {fmt(tx, 2)} "
            f"| {r['wake_p50_ms']:.1f} / {r['wake_p99_ms']:.1f} | {r['machine_busy']:.0%} |"
        )
    out += [
        "",
        "Eight workers (concurrency 1, poll interval 30 s, one Client and one notify adapter each) "
        "in one process share the state database; the starter commits one chain, waits for its "
        "handler to finish, pauses 50 ms and starts the next, so every chain meets 8 idle workers. "
        "A wrapper around each worker's state adapter counts its `jobs_acquire` calls. *By woken "
        "workers* is what the wake-hint budget governs (1.00: exactly one worker queried per job); "
        "*re-checks* are the one further claim a worker makes when its slot frees after a job, "
        "which hints do not cover.",
    ]
    return out


def _scheduling_table(res: Results) -> list[str]:
    rows = [(lib, config, recs[0]) for (p, lib, config), recs in res.groups.items() if p == "scheduling"]
    if not rows:
        return ["(not measured)"]
    out = [
        "| backend | variant (atomic, concurrency 10, prefetch 10) | jobs/s | × plain "
        "| CPU ms / 1,000 jobs | × plain |",
        "|---|---|---|---|---|---|",
    ]
    for lib, config, r in rows:
        out.append(
            f"| {lib} | {config} | {fmt(r['rate'])} | {r['rate_ratio']:.3f} | {r['cpu_per_1000']:.1f} "
            f"| {r['cpu_ratio']:.3f} |"
        )
    out += [
        "",
        "`bench/scheduling.py`, 2 interleaved rounds, medians; each variant on a freshly filled "
        "store. *priorities*: priorities -5..5 round robin; *ordering-keys*: 1,000 keys round "
        "robin (each completion unblocks the key's next chain); *max-running*: `max_running=20` "
        "(concurrency 10 + prefetch 10, as prefetched jobs count as running: the bookkeeping is "
        "measured, not a throttle).",
    ]
    return out


def _added_note(info: dict[str, Any], phase: str) -> list[str]:
    """A line under a section whose figures were measured after the run (``run.py --add``)."""
    d = info.get("added_details", {}).get(phase)
    if not d:
        return []
    plan = ", ".join(f"{k}={v}" for k, v in d.get("plan", {}).items())
    what = "Re-measured" if d["kind"] == "re-measured" else "Measured"
    return [
        f"{what} after the run, on {d['at']} (`bench/run.py --add {phase}`): load average before "
        f"{d['load_before']}, after {d['load_after']}; whole-machine CPU busy {d['busy']}"
        + (f"; plan: {plan}" if plan else "")
        + (f"; server: {d['server']}" if d.get("server") else "")
        + (". These figures replace the run's own." if d["kind"] == "re-measured" else "."),
        "",
    ]


def _cost_table(res: Results) -> list[str]:
    out = [
        "| database round trips per processed job (counting proxy, 2,000 jobs) | round trips / job |",
        "|---|---|",
    ]
    for (phase, lib, config), recs in res.groups.items():
        if phase == "rtt":
            unit = "per chain started" if "start" in config else "per job"
            out.append(f"| {lib} {config} ({unit}) | {recs[0]['per_job']:.2f} |")
    return out


def _history_rss(res: Results, long_run_note: list[str]) -> list[str]:
    out = ["| history scale (jobchain PostgreSQL) | jobs/s | ratio to empty table |", "|---|---|---|"]
    hist = [(c, res.stat("history", "jobchain-pg", c)) for c in res.configs("history", "jobchain-pg")]
    base = hist[0][1] if hist else None
    for config, stat in hist:
        out.append(f"| {config} | {cell(stat)} | {ratio(stat, base)} |")
    out += ["", *long_run_note, *_backlog_table(res), ""]
    out += [
        "| long run (jobchain PostgreSQL) | RSS MB after N processed jobs |",
        "|---|---|",
    ]
    for (phase, _lib, config), recs in res.groups.items():
        if phase == "rss":
            marks = recs[0].get("rss_marks", {})
            shown = ", ".join(
                f"{int(k):,}: {v / MB:.1f}" for k, v in sorted(marks.items(), key=lambda i: int(i[0]))
            )
            out.append(
                f"| {config}, {recs[0]['rate']:,.0f} jobs/s, peak {recs[0]['peak_rss'] / MB:.1f} MB | {shown} |"
            )
    return out


def _long_run(res: Results) -> tuple[str, dict[str, Any]] | None:
    for (phase, _lib, config), recs in res.groups.items():
        if phase == "rss":
            return config, recs[0]
    return None


def _base_rate(res: Results, long_run_config: str) -> tuple[str, Stat | None]:
    """The long run's mode on the plan's job count, same run (the long-run label starts with it)."""
    mode = long_run_config.split(",")[0]
    return mode, res.stat("process", "jobchain-pg", mode)


def _window_rates(rec: dict[str, Any]) -> tuple[float | None, float | None, float | None]:
    """jobs/s over the first 60 s, the last 60 s and the slowest timeline interval."""
    ticks = [(0.0, 0), *((float(t), int(c)) for t, c in rec.get("timeline", []))]
    if len(ticks) < 3:
        return None, None, None

    def count_at(t: float) -> tuple[float, int]:
        return min(ticks, key=lambda tick: abs(tick[0] - t))

    end_t, end_c = ticks[-1]
    span = min(60.0, end_t / 2)
    t1, c1 = count_at(span)
    t2, c2 = count_at(end_t - span)
    slowest = min((c - pc) / (t - pt) for (pt, pc), (t, c) in itertools.pairwise(ticks) if t > pt)
    return c1 / t1 if t1 else None, (end_c - c2) / (end_t - t2) if end_t > t2 else None, slowest


def _backlog_table(res: Results) -> list[str]:
    """Issue 21: processing over a backlog that stays large, with the job table's dead tuples."""
    found = _long_run(res)
    if found is None or "backlog_start" not in found[1]:
        return []
    config, rec = found
    base_config, base = _base_rate(res, config)
    first, last, slowest = _window_rates(rec)
    rate = Stat.of([rec["rate"]])
    base_n = next((r.get("n") for r in res.groups.get(("process", "jobchain-pg", base_config), [])), None)
    hot = rec.get("hot_share")
    out = [
        "| backlog (jobchain PostgreSQL, long run) | value |",
        "|---|---|",
        f"| configuration | {config} |",
        f"| pending jobs at start → at end of the window | {rec['backlog_start']:,} → {rec['backlog_end']:,} |",
        f"| window (first handler → stop) | {rec['seconds']:,.0f} s, {rec['n']:,} jobs |",
        f"| jobs/s over the window | {rec['rate']:,.0f} |",
        f"| jobs/s first 60 s / last 60 s (half the window if shorter) / slowest {rec.get('timeline_every_s', '?')} s interval | {fmt(first)} / {fmt(last)} / {fmt(slowest)} |",
        f"| same mode on {fmt(base_n)} jobs, this run ({base_config}) | {cell(base)} |",
        f"| long run ÷ {fmt(base_n)}-job figure | {ratio(rate, base)} |",
    ]
    if "dead_peak" not in rec:  # the sampler got no row (it names no error: see the run's log)
        return [*out, "| job table statistics (pg_stat_user_tables) | not sampled |"]
    return [
        *out,
        f"| dead tuples on the job table: peak (at s) / at the end (sampled every {rec.get('sample_every_s', '?')} s) "
        f"| {rec['dead_peak']:,} (at {rec['dead_peak_at_s']:.0f} s) / {rec['dead_last']:,} |",
        f"| dead tuples peak, first half / second half of the window | {rec['dead_peak_first_half']:,} / "
        f"{rec['dead_peak_second_half']:,} |",
        f"| updates in the window (n_tup_upd) / HOT (n_tup_hot_upd) | {rec['tup_upd']:,} / {rec['tup_hot_upd']:,}"
        f" ({'–' if hot is None else f'{hot:.1%}'}) |",
        f"| autovacuum runs on the job table in the window | {rec['autovacuums']} |",
        f"| job table with indexes and TOAST, start → end | {rec['table_bytes_start'] / MB:,.0f} MB → "
        f"{rec['table_bytes_end'] / MB:,.0f} MB |",
    ]


def _backlog_targets(res: Results) -> list[tuple[str, str, str, bool | None]]:
    found = _long_run(res)
    if found is None or "backlog_start" not in found[1]:
        return []
    config, rec = found
    base_config, base = _base_rate(res, config)
    full = rec["seconds"] >= 300 and rec["backlog_end"] >= 1_000_000
    size = (
        ""
        if full
        else f" (this run: {rec['seconds']:.0f} s, ≥ {rec['backlog_end']:,} pending: not the target's size)"
    )
    got = rec["rate"] / base.median if base is not None and base.median else None
    rows: list[tuple[str, str, str, bool | None]] = [
        (
            f"backlog (issue 21): ≥ 1,000,000 pending for ≥ 5 min, jobs/s ÷ {base_config} on the plan's jobs{size}",
            "≥ 0.8×",
            "not measured" if got is None else f"{got:.2f}×",
            None if got is None or not full else got >= 0.8,
        )
    ]
    if "dead_peak" not in rec:
        return [
            *rows,
            (
                "backlog (issue 21): dead tuples on the job table bounded",
                "report the peak",
                "not sampled",
                None,
            ),
        ]
    # Bounded: dead tuples do not keep growing over the window (autovacuum keeps up).
    first, second = rec["dead_peak_first_half"], rec["dead_peak_second_half"]
    rows.append(
        (
            "backlog (issue 21): dead tuples on the job table bounded (peak in the window's second half "
            "≤ 1.5× the first half's)",
            "bounded; report the peak",
            f"peak {rec['dead_peak']:,}; halves {first:,} / {second:,}; {rec['autovacuums']} autovacuums",
            second <= 1.5 * max(first, 1),
        )
    )
    return rows


def _profile_table(res: Results) -> list[str]:
    """Self CPU time per layer (cProfile with a CPU clock; shares only, the profiler slows it)."""
    profiles = [(lib, config, recs[0]) for (p, lib, config), recs in res.groups.items() if p == "profile"]
    if not profiles:
        return ["(not measured)"]
    names = [
        name
        for name in dict.fromkeys(name for _, _, rec in profiles for name in rec.get("layers", {}))
        if any(rec.get("layers", {}).get(name, 0) >= 0.005 for _, _, rec in profiles)
    ]
    out = ["| layer | " + " | ".join(f"{lib} {config}" for lib, config, _ in profiles) + " |"]
    out.append("|---|" + "---|" * len(profiles))
    for name in names:
        cells = " | ".join(f"{rec.get('layers', {}).get(name, 0):.0%}" for _, _, rec in profiles)
        out.append(f"| {name} | {cells} |")
    for lib, config, rec in profiles:
        top = "; ".join(f"{t['function']} {t['share']:.0%}" for t in rec.get("top", [])[:6])
        out.append(f"\nCostliest functions, {lib} {config}: {top}.")
    return out


def targets(res: Results) -> list[tuple[str, str, str, bool | None]]:
    """(target, required, measured, met?) for issue 7 item 2."""
    rows: list[tuple[str, str, str, bool | None]] = []

    def add(name: str, need: float, got: float | None, unit: str = "×", below: bool = False) -> None:
        if got is None:
            rows.append((name, f"{need:g}{unit}", "not measured", None))
            return
        ok = got < need if below else got >= need
        rows.append((name, f"{'<' if below else '≥'} {need:g}{unit}", f"{got:,.2f}{unit}", ok))

    def r(a: Stat | None, b: Stat | None) -> float | None:
        return None if a is None or b is None or not b.median else a.median / b.median

    _, jc_best = res.best("process", "jobchain-pg")
    _, pgq_best = res.best("process", "pgqueuer")
    _, pro_best = res.best("process", "procrastinate")
    add("PostgreSQL processing, best jobchain mode ÷ pgqueuer best", 2, r(jc_best, pgq_best))
    add("PostgreSQL processing, best jobchain mode ÷ procrastinate best", 10, r(jc_best, pro_best))
    per_job = best_of(
        res,
        "process",
        "jobchain-pg",
        tuple(c for c in res.configs("process", "jobchain-pg") if not c.startswith("batch")),
    )
    add("… best per-job mode (one handler call per job) ÷ pgqueuer best", 2, r(per_job, pgq_best))
    skip_locked = res.stat("ref", "pgbench", "skip-locked")
    atomic = best_of(res, "process", "jobchain-pg", ("atomic c10", "atomic c10 prefetch 10"))
    add("per-job atomic c10 ÷ hand-written SKIP LOCKED (10 clients)", 0.7, r(atomic, skip_locked))
    atomic_any = best_of(
        res,
        "process",
        "jobchain-pg",
        tuple(c for c in res.configs("process", "jobchain-pg") if c.startswith("atomic c")),
    )
    add("… best per-job atomic, any concurrency, ÷ hand-written SKIP LOCKED", 0.7, r(atomic_any, skip_locked))
    add(
        "start one at a time ÷ pgqueuer",
        1.5,
        r(res.stat("start", "jobchain-pg", "single"), res.stat("start", "pgqueuer", "single")),
    )
    add(
        "start one at a time, jobchain in autocommit ÷ pgqueuer",
        1.5,
        r(res.stat("start", "jobchain-pg", "single autocommit"), res.stat("start", "pgqueuer", "single")),
    )
    for b in ("batch 100", "batch 1000"):
        add(
            f"start {b} ÷ pgqueuer {b}",
            1.5,
            r(res.stat("start", "jobchain-pg", b), res.stat("start", "pgqueuer", b)),
        )
    sq = best_of(res, "process", "jobchain-sqlite", ("atomic c10", "atomic c10 prefetch 10"))
    add("SQLite processing atomic c10", 10000, sq.median if sq else None, " jobs/s")
    sqlite_configs = res.configs("process", "jobchain-sqlite")
    sq_atomic = best_of(
        res,
        "process",
        "jobchain-sqlite",
        tuple(c for c in sqlite_configs if c.startswith("atomic c") and "normal" not in c),
    )
    add(
        "… SQLite processing atomic, any concurrency",
        10000,
        sq_atomic.median if sq_atomic else None,
        " jobs/s",
    )
    sq_best = best_of(
        res, "process", "jobchain-sqlite", tuple(c for c in sqlite_configs if "normal" not in c)
    )
    add(
        "… SQLite processing, best mode (batch processors included)",
        10000,
        sq_best.median if sq_best else None,
        " jobs/s",
    )
    sq_normal = best_of(res, "process", "jobchain-sqlite", tuple(c for c in sqlite_configs if "normal" in c))
    add(
        "… SQLite processing, best mode with synchronous=normal",
        10000,
        sq_normal.median if sq_normal else None,
        " jobs/s",
    )
    sb = res.stat("start", "jobchain-sqlite", "batch 1000")
    add("SQLite batched start (1,000)", 50000, sb.median if sb else None, " chains/s")
    for lib, config, samples in _latency_rows(res):
        if lib == "jobchain-pg" and not config.startswith("polling") and samples:
            add(f"wake-up p99, {config}", 15, percentile(samples, 0.99), " ms", below=True)
            if config in ("redis", "nats", "postgres LISTEN/NOTIFY"):  # issue 6 item 6: every broker
                add(f"wake-up p99, {config} (issue 6)", 20, percentile(samples, 0.99), " ms", below=True)
    hist = [res.stat("history", "jobchain-pg", c) for c in res.configs("history", "jobchain-pg")]
    if len(hist) >= 2:
        add("history: throughput with history ÷ empty", 0.8, r(hist[-1], hist[0]))
    peaks = [
        r["peak_rss"] / MB
        for (p, lib, c), recs in res.groups.items()
        for r in recs
        if p == "process" and lib == "jobchain-pg" and " c10" in c and r.get("peak_rss")
    ]
    if peaks:
        rows.append(
            ("peak worker RSS, c10 (any mode)", "≤ 100 MB", f"{max(peaks):.1f} MB", max(peaks) <= 100)
        )
    rows += _backlog_targets(res)
    for (phase, _lib, _config), recs in res.groups.items():
        if phase == "rss":
            marks = {int(k): v for k, v in recs[0].get("rss_marks", {}).items()}
            base = 100_000 if 100_000 in marks else min((m for m in marks if m >= 20_000), default=None)
            last = max(marks, default=None)
            if base is not None and last is not None and last > base:
                growth = marks[last] / marks[base] - 1
                note = (
                    ""
                    if base == 100_000 and last >= 1_000_000
                    else " (not the full 100,000 → 1,000,000: see long run)"
                )
                rows.append(
                    (f"RSS growth {base:,} → {last:,} jobs{note}", "< 10 %", f"{growth:.1%}", growth < 0.10)
                )
    return rows


def best_of(res: Results, phase: str, lib: str, configs: tuple[str, ...]) -> Stat | None:
    stats = [s for s in (res.stat(phase, lib, c) for c in configs) if s is not None]
    return max(stats, key=lambda s: s.median, default=None)


def _differs(info: dict[str, Any]) -> str:
    differs = info.get("server", {}).get("differs", {})
    if not differs:
        return ""
    shown = ", ".join(f"{k} {d['actual']} (requested {d['requested']})" for k, d in differs.items())
    return f" **Not as requested:** {shown}."


def write_report(info: dict[str, Any], records: list[dict[str, Any]], md_path: Path, png_path: Path) -> str:
    res = Results(records)
    m, v = info["machine"], info["versions"]
    lines = [
        f"# jobchain benchmark — {md_path.stem}",
        "",
        f"Machine: {m['cpus']} cores ({m['cpu_model']}), {m['memory_gib']} GiB, {m['os']}, Python {m['python']}; "
        f"PostgreSQL {m['postgresql']} on the same machine, {m.get('pg_server', 'the shared server')}; jobchain, "
        f"the peers and the pgbench references all ran on it. Server settings (pg_settings, read after start): "
        f"{m['pg_settings']}.{_differs(info)} Whole-machine CPU busy over the "
        f"run: {m.get('busy_overall', '?')}; load average before {m['load_before']}, after {m.get('load_after', '?')}.",
        "",
        "Versions: " + ", ".join(f"{k} {val}" for k, val in v.items()) + ".",
        "",
        f"Plan: {info['plan']}. Cells are median (min–max) over the repeats; ratios are of medians from this run. "
        f"Run time {info.get('duration_s', '?')} s.",
        *(
            ["", f"Phases added after the run with `bench/run.py --add`: {', '.join(info['added_later'])}."]
            if info.get("added_later")
            else []
        ),
        "",
        "## Targets (issue 7; rows marked issue 6 or issue 21 are those issues')",
        "",
        "| target | required | measured | met |",
        "|---|---|---|---|",
    ]
    for name, need, got, ok in targets(res):
        lines.append(f"| {name} | {need} | {got} | {'yes' if ok else ('–' if ok is None else '**no**')} |")
    lines += ["", "## Start", "", *_start_table(res), "", "## Processing", "", *_process_table(res)]
    lines += ["", "## Several worker processes, one database", "", *_added_note(info, "processes")]
    lines += [*_processes_table(res)]
    lines += ["", "## Synchronous starts (jobchain.sync)", "", *_sync_table(res)]
    lines += ["", "## SQLite and the in-process adapter", "", *_sqlite_table(res)]
    lines += ["", "## Wake-up latency", "", *_added_note(info, "latency"), *_latency_table(res)]
    lines += ["", "## Acquisitions per job, 8 idle workers", "", *_added_note(info, "wake_hints")]
    lines += [*_wake_hints_table(res), "", "## Cost", "", *_cost_table(res)]
    lines += ["", "## Scheduling controls", "", *_scheduling_table(res)]
    lines += ["", "## History scale and long-run memory", "", *_history_rss(res, _added_note(info, "rss"))]
    lines += ["", "## Where the worker's CPU goes", "", *_profile_table(res), "", "## References", ""]
    lines += ["| reference (pgbench on the same server) | transactions/s |", "|---|---|"]
    lines.append(
        f"| single-row UPDATE, autocommit, 10 clients (-c 10 -j 2) | {cell(res.stat('ref', 'pgbench', 'update'))} |"
    )
    lines.append(
        "| SKIP LOCKED, one claim per transaction, 20,000 rows, 10 clients (-c 10 -j 2) "
        f"| {cell(res.stat('ref', 'pgbench', 'skip-locked'))} |"
    )
    lines.append(
        "| single-row INSERT, autocommit, prepared, one client (-c 1): the ceiling of one-at-a-time starts "
        f"| {cell(res.stat('ref', 'pgbench', 'insert-one-client'))} |"
    )
    errors = [r for r in records if r["phase"] == "error"]
    if errors:
        lines += ["", "## Failed phases", ""] + [f"- {e['lib']}: {e['config']}" for e in errors]
    text = "\n".join(lines) + "\n"
    md_path.write_text(text)
    chart(res, png_path, md_path.stem, int(info["plan"].get("jobs", 20000)))
    return text


def chart(res: Results, path: Path, title: str, jobs: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(16, 13))
    libs = ["jobchain-pg", "pgqueuer", "procrastinate", "jobchain-sqlite", "jobchain-memory"]
    colors = {
        "jobchain-pg": "#1f77b4",
        "pgqueuer": "#ff7f0e",
        "procrastinate": "#2ca02c",
        "jobchain-sqlite": "#9467bd",
        "jobchain-memory": "#8c564b",
    }

    def bars(ax: Any, items: list[tuple[str, str, Stat | None]], xlabel: str, log: bool, digits: int) -> None:
        shown = [(lib, label, s) for lib, label, s in items if s is not None]
        ys = list(range(len(shown)))[::-1]
        med = [s.median for _, _, s in shown]
        err = [[s.median - s.low for _, _, s in shown], [s.high - s.median for _, _, s in shown]]
        ax.barh(ys, med, xerr=err, color=[colors.get(lib, "grey") for lib, _, _ in shown], capsize=3)
        ax.set_yticks(ys, [label for _, label, _ in shown], fontsize=8)
        ax.set_xlabel(xlabel)
        if log:
            ax.set_xscale("log")
        for y, m in zip(ys, med, strict=True):
            ax.text(m, y, f" {m:,.{digits}f}", va="center", fontsize=7)

    start = [
        (lib, f"{lib} · {c}", res.stat("start", lib, c))
        for c in ("single", "batch 100", "batch 1000")
        for lib in libs
    ]
    bars(axes[0][0], start, "chains/s (log scale)", True, 0)
    axes[0][0].set_title("Start: chains per second, one client")
    proc = [
        (lib, f"{lib} · {c}", res.stat("process", lib, c))
        for lib in libs
        for c in res.configs("process", lib)
    ]
    bars(axes[0][1], proc, "jobs/s (log scale)", True, 0)
    axes[0][1].set_title(f"Process {jobs:,} no-op jobs, one worker process")
    ax = axes[1][0]
    rows = [(f"{lib} · {config}", s) for lib, config, s in _latency_rows(res) if s]
    ys = list(range(len(rows)))[::-1]
    for i, q in enumerate((0.5, 0.95, 0.99)):
        ax.barh(
            [y + (1 - i) * 0.27 for y in ys],
            [percentile(s, q) for _, s in rows],
            height=0.27,
            label=f"p{int(q * 100)}",
        )
    ax.set_yticks(ys, [label for label, _ in rows], fontsize=8)
    ax.set_xlabel("ms")
    ax.axvline(15, color="red", lw=0.8, ls="--", label="target p99 15 ms")
    ax.legend(fontsize=8)
    ax.set_title("Wake-up latency, commit → handler start (idle worker)")
    cpu = [
        (lib, f"{lib} · {c}", res.stat("process", lib, c, "cpu_per_1000"))
        for lib in libs
        for c in res.configs("process", lib)
    ]
    bars(axes[1][1], cpu, "worker CPU seconds per 1,000 jobs", False, 2)
    axes[1][1].set_title("Worker CPU per 1,000 jobs")
    fig.suptitle(f"jobchain vs pgqueuer vs procrastinate — {title} (median; whiskers min–max)")
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)
