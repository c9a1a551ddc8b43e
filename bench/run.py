"""``make bench``: jobchain and its peers, same workloads, same PostgreSQL server, one run.

Creates the bench-only environment (bench/.venv: pgqueuer, procrastinate, matplotlib … plus
jobchain's packages in editable mode) on first use and re-executes itself inside it. Every
timed phase runs in its own subprocess so CPU and RSS belong to the measured process.
Writes bench/results/<date>.json (raw), <date>.md (tables) and <date>.png (chart).

Environment knobs (defaults in brackets): BENCH_REPEATS [3], BENCH_JOBS [20000],
BENCH_SINGLE [2000], BENCH_LATENCY [2000 per notify backend], BENCH_LATENCY_OTHER [500: polling
and the peers], BENCH_WAKE_JOBS [500 chains per case of the 8-idle-workers phase],
BENCH_HISTORY [1000000], BENCH_RSS_JOBS [1000000] and BENCH_RSS_SECONDS [300]
(the long run stops at whichever comes first), BENCH_BUDGET [1560 s: repeats 2 and 3 run only
if they fit], BENCH_QUICK=1 (a smoke run: small counts), BENCH_PG / BENCH_REDIS / BENCH_NATS.
"""

from __future__ import annotations

import json
import os
import platform
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from benchenv import ensure_venv

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent


if __name__ == "__main__":
    ensure_venv(__file__)

sys.path.insert(0, str(BENCH))
from common import LOOP, TMP, CpuMeter, pg_url  # noqa: E402
from phases import PHASE_PLAN_KEYS, Plan, Runner  # noqa: E402
from report import write_report  # noqa: E402


def env_int(name: str, default: int) -> int:
    return int(os.environ.get(name, default))


def plan_from_env() -> Plan:
    quick = os.environ.get("BENCH_QUICK") == "1"
    return Plan(
        repeats=env_int("BENCH_REPEATS", 1 if quick else 3),
        jobs=env_int("BENCH_JOBS", 2000 if quick else 20000),
        single=env_int("BENCH_SINGLE", 300 if quick else 2000),
        latency=env_int("BENCH_LATENCY", 100 if quick else 2000),
        latency_other=env_int("BENCH_LATENCY_OTHER", 50 if quick else 500),
        history=env_int("BENCH_HISTORY", 20000 if quick else 1_000_000),
        rss_jobs=env_int("BENCH_RSS_JOBS", 5000 if quick else 1_000_000),
        rss_seconds=env_int("BENCH_RSS_SECONDS", 30 if quick else 300),
        budget=env_int("BENCH_BUDGET", 600 if quick else 1560),
        quick=quick,
        wake_jobs=env_int("BENCH_WAKE_JOBS", 100 if quick else 500),
    )


def versions() -> dict[str, str]:
    from importlib.metadata import version

    names = ["jobchain", "jobchain-postgres", "jobchain-sqlite", "jobchain-redis", "jobchain-nats"]
    names += ["pgqueuer", "asyncpg", "procrastinate", "psycopg", "psycopg-pool", "aiosqlite", "uvloop"]
    names += ["matplotlib"]
    found = {}
    for name in names:
        try:
            found[name] = version(name)
        except Exception:
            found[name] = "missing"
    return found


def machine() -> dict[str, str]:
    import psutil
    from common import admin_sql

    settings = admin_sql(
        "SELECT name, setting FROM pg_settings WHERE name IN ('fsync','synchronous_commit',"
        "'shared_buffers','max_connections','wal_sync_method','commit_delay')"
    )
    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        platform.processor(),
    )
    return {
        "cpus": str(os.cpu_count()),
        "cpu_model": cpu,
        "memory_gib": f"{psutil.virtual_memory().total / 2**30:.0f}",
        "os": platform.platform(),
        "python": platform.python_version(),
        "postgresql": admin_sql("SHOW server_version")[0][0],
        "pg_settings": ", ".join(f"{k}={v}" for k, v in settings),
        "load_before": " ".join(f"{x:.2f}" for x in os.getloadavg()),
    }


def publish(md: str, name: str) -> None:
    """Copy the table of this run into docs/benchmarks.md, between its result markers."""
    doc = ROOT / "docs" / "benchmarks.md"
    start, end = "<!-- bench:results:start -->", "<!-- bench:results:end -->"
    text = doc.read_text()
    if start not in text or end not in text:
        print("bench: docs/benchmarks.md has no result markers; left unchanged", flush=True)
        return
    body = md.split("\n", 1)[1].replace("\n## ", "\n### ")
    block = (
        f"{start}\nRun `{name}` (`bench/results/{name}.md`, raw samples in `{name}.json`).\n\n"
        f"![benchmark chart](../bench/results/{name}.png)\n{body}{end}"
    )
    head, rest = text.split(start, 1)
    doc.write_text(head + block + rest.split(end, 1)[1])


def add_phases(phases: list[str], path: Path) -> None:
    """``run.py --add PHASE[,PHASE] RESULTS.json``: run phases missing from a recorded run (the same
    code as a full run), merge their records, and write the table, chart and docs again
    (``--add "" RESULTS.json`` only writes them again)."""
    data = json.loads(path.read_text())
    runner = Runner(plan_from_env())
    runner.t0 = time.monotonic()
    details = data["info"].setdefault("added_details", {})
    for phase in filter(None, phases):  # --add "" FILE only renders the table again
        print(f"bench: {phase} (added to {path.name})", flush=True)
        # A phase the run already had is re-measured: the report says when, and under what load.
        recorded = any(r["phase"] == phase for r in data["results"])
        kind = details.get(phase, {}).get("kind") or ("re-measured" if recorded else "added")
        meter = CpuMeter()
        meter.start()
        load_before = " ".join(f"{x:.2f}" for x in os.getloadavg())
        getattr(runner, phase)()
        details[phase] = {
            "kind": kind,
            "at": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
            "load_before": load_before,
            "load_after": " ".join(f"{x:.2f}" for x in os.getloadavg()),
            "busy": f"{meter.stop():.0%}",
            "plan": {k: getattr(runner.plan, k) for k in PHASE_PLAN_KEYS.get(phase, ())},
        }
    data["results"] = [r for r in data["results"] if r["phase"] not in phases] + runner.records
    data["info"]["added_later"] = sorted(set(data["info"].get("added_later", [])) | set(filter(None, phases)))
    path.write_text(json.dumps(data, indent=1))
    name = path.stem
    md = write_report(data["info"], data["results"], path.with_suffix(".md"), path.with_suffix(".png"))
    if not name.endswith("-quick"):
        publish(md, name)
    print(md)


def main() -> None:
    if len(sys.argv) == 4 and sys.argv[1] == "--add":
        add_phases(sys.argv[2].split(","), Path(sys.argv[3]))
        return
    plan = plan_from_env()
    TMP.mkdir(parents=True, exist_ok=True)
    started = time.time()
    meter = CpuMeter()
    meter.start()
    plan_info = plan.__dict__ | {"loop": LOOP}
    info = {"machine": machine(), "versions": versions(), "plan": plan_info, "pg": pg_url("")}
    print(f"bench: {json.dumps(info['plan'])}", flush=True)
    runner = Runner(plan)
    results = runner.run_all()
    info["machine"]["busy_overall"] = f"{meter.stop():.0%}"
    info["machine"]["load_after"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    info["duration_s"] = round(time.time() - started)
    stamp = datetime.now(UTC).strftime("%Y-%m-%d")
    out = BENCH / "results"
    out.mkdir(exist_ok=True)
    name = f"{stamp}-quick" if plan.quick else stamp
    (out / f"{name}.json").write_text(json.dumps({"info": info, "results": results}, indent=1))
    md = write_report(info, results, out / f"{name}.md", out / f"{name}.png")
    if not plan.quick:
        publish(md, name)
    print(md)
    print(f"bench: wrote bench/results/{name}.md, .png and .json in {info['duration_s']} s", flush=True)


if __name__ == "__main__":
    main()
