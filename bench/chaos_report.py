"""The failure-mode table from a chaos run: ``bench/chaos_report.py bench/results/chaos-<date>.json``.

``make chaos`` runs the full chaos suite (``packages/postgres/tests/chaos``) with
``JOBCHAIN_CHAOS_RESULTS`` pointing at ``bench/results/chaos-<date>.json``, then this script
writes ``chaos-<date>.md`` beside it and refreshes the "Failure modes" section of
``docs/benchmarks.md`` (between its ``chaos:results`` markers). Every figure comes from the
JSON; nothing is typed in by hand.
"""
# ruff: noqa: RUF001, E501 -- typographic dashes and signs on purpose; long table-format strings

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "benchmarks.md"
START, END = "<!-- chaos:results:start -->", "<!-- chaos:results:end -->"
ISSUE_TARGET = 10.0
"""Issue 16: with default settings, a SIGKILLed worker's jobs run again within 10 s."""
KB = 1024


def seconds(value: float | None) -> str:
    return "–" if value is None else f"{value:.1f}"


def faults_of(cell: dict[str, Any], kind: str | None = None) -> list[dict[str, Any]]:
    return [f for f in cell["faults"] if kind is None or (f["killed_pid"] is not None) == (kind == "kill")]


def with_bound(value: float | None, bound: float | None) -> str:
    if value is None:
        return "–"
    return f"{value:.1f} (≤ {bound:.0f})" if bound is not None else f"{value:.1f}"


def recovery_bound(cell: dict[str, Any]) -> float | None:
    bounds = [v for k, v in cell.get("bounds", {}).items() if k.startswith("recovery_")]
    return max(bounds) if bounds else None


def rescue_bound(cell: dict[str, Any]) -> float | None:
    bounds = [v for k, v in cell.get("bounds", {}).items() if k.startswith("rescue_")]
    return max(bounds) if bounds else None


def per_fault(cell: dict[str, Any]) -> str:
    """Re-executions per fault: after a kill, the killed process's jobs; otherwise the rest."""
    kills = faults_of(cell, "kill")
    if kills:
        return f"{cell['crash_re_executions'] / len(kills):.1f}"
    if cell["faults"]:
        return f"{cell['other_re_executions'] / len(cell['faults']):.1f}"
    return "–"


def rescue_paths(cell: dict[str, Any]) -> str:
    reasons = cell.get("extra", {}).get("rescue_reasons") or {}
    return ", ".join(f"{reason} {count}" for reason, count in sorted(reasons.items())) or "–"


def cells_table(cells: list[dict[str, Any]]) -> list[str]:
    out = [
        "| cell | fault | outcome | chains | lost | completed twice | re-executions (after kills / other) "
        "| re-executions per fault | killed jobs run again after (max s, bound) "
        "| backlog drained after fault (max s, bound) | slowest worker resumed (max s) | rescued by |",
        "|---|---|---|---:|---:|---:|---|---:|---:|---:|---:|---|",
    ]
    for cell in cells:
        kills = faults_of(cell, "kill")
        out.append(
            f"| {cell['cell']} | {cell.get('what') or '–'} | {cell.get('outcome', '?')} | {cell['started']:,} "
            f"| **{cell['lost']}** | {cell['double_completions']} "
            f"| {cell['crash_re_executions']} / {cell['other_re_executions']} | {per_fault(cell)} "
            f"| {with_bound(cell.get('max_rescue_started_after'), rescue_bound(cell)) if kills else '–'} "
            f"| {with_bound(cell.get('max_backlog_drained_after'), recovery_bound(cell))} "
            f"| {seconds(cell.get('max_slowest_worker_resumed_after'))} | {rescue_paths(cell)} |"
        )
    return out


def kills_table(cells: list[dict[str, Any]]) -> list[str]:
    out = [
        "| cell | kill | jobs in flight | run again after (s, per type) | completed after (s) "
        "| chains still queued then |",
        "|---|---:|---:|---|---:|---:|",
    ]
    for cell in cells:
        for number, fault in enumerate(faults_of(cell, "kill"), 1):
            by_type = ", ".join(f"{t} {v:.1f}" for t, v in sorted(fault["rescue_started_by_type"].items()))
            queued = fault.get("backlog_at_rescue")
            out.append(
                f"| {cell['cell']} | {number} | {fault['in_flight']} | {by_type or '–'} "
                f"| {seconds(fault.get('rescued_after'))} | {'–' if queued is None else queued} |"
            )
    return out


def faults_table(cells: list[dict[str, Any]]) -> list[str]:
    out = [
        "| cell | fault | lasted (s) | jobs unfinished at its end | first completion after (s) "
        "| slowest worker resumed after (s) | backlog drained after (s, bound) |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for cell in cells:
        bounds = cell.get("bounds", {})
        for number, fault in enumerate(cell["faults"]):
            if fault["killed_pid"] is not None:
                continue
            out.append(
                f"| {cell['cell']} | {number + 1} | {fault['ended'] - fault['started']:.1f} | {fault['in_flight']} "
                f"| {seconds(fault.get('first_completion_after'))} "
                f"| {seconds(fault.get('slowest_worker_resumed_after'))} "
                f"| {with_bound(fault.get('backlog_drained_after'), bounds.get(f'recovery_{number}'))} |"
            )
    return out


def stalls_table(cells: list[dict[str, Any]]) -> list[str]:
    rows = [c for c in cells if "stale_starts" in c.get("extra", {}) and "limited_at_once_max" in c["extra"]]
    if not rows:
        return []
    out = [
        "| cell | fault | stale handler starts | limited jobs at work at once (limit) "
        "| presumed-dead warnings | liveness lapses | victim claims again after (s) "
        "| victim completed again after (s) |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for cell in rows:
        extra = cell["extra"]
        victims = [f for f in cell["faults"] if f.get("victim_pid") is not None]
        rejoined = ", ".join(seconds(f.get("victim_rejoined_after")) for f in victims) or "–"
        resumed = ", ".join(seconds(f.get("victim_resumed_after")) for f in victims) or "–"
        out.append(
            f"| {cell['cell']} | {cell.get('what') or '–'} | **{extra['stale_starts']}** "
            f"| {extra['limited_at_once_max']} ({extra.get('limit', '?')}) "
            f"| {extra.get('presumed_dead_warnings', 0)} | {extra.get('liveness_lapses', 0)} "
            f"| {rejoined} | {resumed} |"
        )
    return out


def storm_row(label: str, cell: dict[str, Any], bloat: dict[str, int]) -> str:
    updates = bloat["n_tup_upd"]
    hot = f"{bloat['n_tup_hot_upd']:,} ({100 * bloat['n_tup_hot_upd'] / updates:.0f} %)" if updates else "0"
    return (
        f"| {label} | {bloat['n_live_tup']:,} | {bloat['n_dead_tup']:,} | {updates:,} | {hot} "
        f"| {bloat['autovacuum_count']} | {bloat['table_bytes'] // KB:,} KiB | {bloat['index_bytes'] // KB:,} KiB "
        f"| {bloat['total_bytes'] // KB:,} KiB |"
    )


def storm_table(cells: list[dict[str, Any]]) -> list[str]:
    out: list[str] = []
    for cell in cells:
        extra = cell.get("extra", {})
        after = extra.get("bloat_after")
        if not after:
            continue
        warnings = extra.get("worker_log_lines", {}).get("WARNING", 0)
        out += [
            f"{cell.get('what') or cell['cell']}: {cell['started']:,} chains, {cell['executions']:,} executions, "
            f"{warnings:,} WARNING lines logged by the workers. The job table "
            "(`pg_stat_user_tables`, `pg_relation_size`, `pg_indexes_size`), the largest value of each "
            "column sampled during the storm, and after the drain:",
            "",
            "| when | live tuples | dead tuples | updates | HOT updates | autovacuum runs | table | indexes | total |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        if extra.get("bloat_peak"):
            out.append(storm_row("during the storm (peak)", cell, extra["bloat_peak"]))
        out.append(storm_row("after the drain", cell, after))
    return out


def headline(cells: list[dict[str, Any]]) -> list[str]:
    by_name = {c["cell"]: c for c in cells}
    lost = sum(c["lost"] for c in cells)
    doubles = sum(c["double_completions"] for c in cells)
    passed = sum(1 for c in cells if c.get("outcome") == "passed")
    out = [
        f"- {passed} of {len(cells)} cells passed; lost chains: **{lost}**; completed twice: **{doubles}**."
    ]
    defaults = by_name.get("sigkill-defaults")
    if defaults:
        value = defaults.get("max_rescue_started_after")
        met = "met" if value is not None and value <= ISSUE_TARGET else "**not met**"
        out.append(
            f"- SIGKILL with default settings (60 s lease, 60 s idle poll, 2 s heartbeat): the killed "
            f"worker's jobs ran again after at most **{seconds(value)} s** over {len(faults_of(defaults, 'kill'))} "
            f"kill(s) (issue 16 target ≤ {ISSUE_TARGET:.0f} s: {met}; before issue 16 it was the full lease, 60 s)."
        )
    saturated = by_name.get("sigkill-saturated")
    if saturated:
        queued = [f.get("backlog_at_rescue") for f in faults_of(saturated, "kill")]
        shown = ", ".join("–" if q is None else f"{q:,}" for q in queued)
        out.append(
            f"- SIGKILL under a saturating load: the killed jobs ran again after at most "
            f"{seconds(saturated.get('max_rescue_started_after'))} s, with {shown} chains still queued "
            "(before issue 16 they waited until the queue drained)."
        )
    mixed = by_name.get("mixed-leases")
    if mixed:
        kill = faults_of(mixed, "kill")
        if kill:
            types = ", ".join(
                f"{t} (lease {mixed['settings']['leases'].get(t, '?'):.0f} s) after {v:.1f} s"
                for t, v in sorted(kill[0]["rescue_started_by_type"].items())
            )
            out.append(f"- A worker serving two leases, SIGKILLed: its jobs ran again — {types or '–'}.")
    return out


def meta_lines(data: dict[str, Any]) -> list[str]:
    meta = data.get("meta", {})
    return [
        f"Mode: {data.get('mode', '?')}; commit {meta.get('commit', '?')}; machine: {meta.get('machine', '?')}, "
        f"Python {meta.get('python', '?')}; private server: {meta.get('postgresql', '?')}. "
        f"Run time {meta.get('wall_seconds', '?')} s; load average before {meta.get('load_before', '?')}, "
        f"after {meta.get('load_after', '?')}."
    ]


DEFINITIONS = [
    "Definitions: *lost* = chains the producer committed (and jobs in the table) not `completed` "
    "after the drain; *completed twice* = two `chaos_audit` rows for one job, each written inside its "
    "attempt's transaction; *re-executions* come from the per-execution log (a line per handler start, "
    "written before any database work); *run again after* = from the SIGKILL to the start of the "
    "re-execution of the last job the killed process had in flight; *backlog drained* = from the end "
    "of a fault until every chain started before it completed; *rescued by* = the jobs' "
    "`rescue_reason` (`lease_expired`: a live worker's timer reaper; `worker_dead`: a live worker's "
    "heartbeat found the killed one silent); *stale handler starts* = handler starts after the job's "
    "completion had committed or after a later attempt of it had begun; *limited jobs at work at once* = "
    "the most distinct `chaos.limited` executions whose logged steps (each taken after reading the abort "
    "signal) overlap; *liveness lapses* = times a worker went past its own liveness deadline (no "
    "heartbeat confirmed) and aborted its attempts; *victim claims again after* = from the end of the "
    "stall or partition to the victim's log line saying a heartbeat got through and it claims again; "
    "*victim completed again after* = to its first completion (it competes for jobs with workers "
    "the notifications reach sooner, so this is the longer figure). Bounds are derived from each cell's settings "
    "(lease, heartbeat interval, recovery backoff, load); see `packages/postgres/tests/chaos/cells.py`.",
]


def report(data: dict[str, Any], source: Path) -> str:
    cells = data["cells"]
    date = data.get("meta", {}).get("date", source.stem.removeprefix("chaos-"))
    lines = [f"# jobchain failure modes — {date}", "", *meta_lines(data), "", *headline(cells), ""]
    lines += ["## Cells", "", *cells_table(cells), "", "## Kills", "", *kills_table(cells), ""]
    lines += ["## Other faults", "", *faults_table(cells), ""]
    stalls = stalls_table(cells)
    if stalls:
        lines += ["## Stalls and partitions", "", *stalls, ""]
    storm = storm_table(cells)
    if storm:
        lines += ["## Retry storm", "", *storm, ""]
    lines += [*DEFINITIONS, ""]
    return "\n".join(lines)


def shown(path: Path) -> Path:
    return path.relative_to(ROOT) if path.is_relative_to(ROOT) else path


def doc_section(data: dict[str, Any], md: Path) -> str:
    cells = data["cells"]
    relative = shown(md)
    lines = [
        START,
        f"Run `{md.stem}` (`{relative}`, raw figures in `{md.with_suffix('.json').name}`).",
        "",
        *meta_lines(data),
        "",
        *headline(cells),
        "",
        *cells_table(cells),
        "",
        *stalls_table(cells),
        "",
        *storm_table(cells),
        "",
        *DEFINITIONS,
        END,
    ]
    return "\n".join(lines)


SECTION_INTRO = """## Failure modes

`make chaos` runs the chaos suite (`packages/postgres/tests/chaos`) in its full form: real
`jobchain worker` processes on a private PostgreSQL cluster (initdb on a free loopback port,
never the shared server), a producer at a steady rate, faults injected beside it (SIGKILLed
workers, terminated backends, server restarts, held connection slots, Redis and NATS taken
away, a retry storm, a worker frozen by SIGSTOP, a worker cut off by a frozen TCP proxy, a slow
network), then an audit from the database and a per-execution log. It writes
`bench/results/chaos-<date>.json` and `.md` and refreshes this section with
`bench/chaos_report.py`; nothing here is typed in by hand.

```sh
make chaos                     # the full suite, about 20 minutes; needs initdb/pg_ctl, redis-server, nats-server
JOBCHAIN_CHAOS=1 .venv/bin/python -m pytest packages/postgres/tests/chaos -p no:randomly   # compact, every cell
JOBCHAIN_CHAOS=0 make test     # the test suite without its compact chaos cells
```

A compact version of the cells (seconds per fault instead of minutes, a 3 s lease and a 0.5 s
poll instead of the defaults, except in the default-settings cell) runs in every `make test`,
serially on one xdist worker: about four minutes on a quiet 2-core machine (the stall and
partition cells take half of that), longer with both cores kept busy by other processes; the
fast-stop restart and the held connections without a terminate run only with
`JOBCHAIN_CHAOS=1`. Every cell asserts that nothing is lost, nothing completes twice, only jobs
a fault hit run again, and recovery within bounds derived from the cell's settings. The stall and
partition cells also assert that no handler began a job its worker no longer held (*stale handler
starts*), that the `max_running=2` type with a cooperative handler never had more than two jobs at
work at once, and that the frozen or cut-off worker logged the *presumed dead* WARNING and
completed jobs again.

"""


def refresh_doc(doc: Path, section: str) -> None:
    """Replace the Failure modes section (heading to end marker), or append it."""
    text = doc.read_text()
    heading = SECTION_INTRO.split("\n", 1)[0]
    if heading in text and END in text:
        before, rest = text.split(heading, 1)
        _, after = rest.split(END, 1)
        text = before + SECTION_INTRO + section + after
    else:
        text = text.rstrip("\n") + "\n\n" + SECTION_INTRO + section + "\n"
    doc.write_text(text)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", type=Path, help="bench/results/chaos-<date>.json")
    parser.add_argument("--doc", type=Path, default=DOC, help="the page whose section to refresh")
    args = parser.parse_args(argv[1:])
    source = args.results.resolve()
    data = json.loads(source.read_text())
    if not data.get("cells"):
        print(f"{source}: no chaos cells recorded", file=sys.stderr)
        return 1
    md = source.with_suffix(".md")
    md.write_text(report(data, source))
    refresh_doc(args.doc, doc_section(data, md))
    print(f"wrote {shown(md)} and refreshed the failure modes in {shown(args.doc.resolve())}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
