"""``make bench``: jobchain and its peers, same workloads, same PostgreSQL server, one run.

Creates the bench-only environment (bench/.venv: pgqueuer, procrastinate, matplotlib … plus
jobchain's packages in editable mode) on first use and re-executes itself inside it. Every
timed phase runs in its own subprocess so CPU and RSS belong to the measured process.
Writes bench/results/<date>.json (raw), <date>.md (tables) and <date>.png (chart).

Environment knobs (defaults in brackets): BENCH_REPEATS [3], BENCH_JOBS [20000],
BENCH_SINGLE [2000], BENCH_LATENCY [2000 per notify backend], BENCH_LATENCY_OTHER [500: polling
and the peers], BENCH_WAKE_JOBS [500 chains per case of the 8-idle-workers phase],
BENCH_HISTORY [1000000], BENCH_RSS_JOBS [1000000: the long run's backlog never falls below it]
and BENCH_RSS_SECONDS [300: the long run's window, from its first handler], BENCH_BUDGET
[1800 s: repeats 2 and 3 run only if they fit], BENCH_QUICK=1 (a smoke run: small counts),
BENCH_PG / BENCH_REDIS / BENCH_NATS.

PostgreSQL: unless BENCH_PG names a server, the run starts a private cluster of its own
(``jobchain_postgres.testing.PrivateServer``: initdb into a temporary directory, pg_ctl on a free
loopback port) with the production-like settings of ``benchenv.SERVER_SETTINGS``; jobchain, the
peers and the pgbench references all run on it. It is stopped and deleted at the end, also on a
failure, Ctrl-C or SIGTERM. The results page records the settings the server actually ran with.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from benchenv import SERVER_SETTINGS, bench_server, ensure_venv

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
        budget=env_int("BENCH_BUDGET", 600 if quick else 1800),
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


SHOWN_SETTINGS = (
    *SERVER_SETTINGS,
    "wal_sync_method",
    "commit_delay",
    "full_page_writes",
    "wal_level",
    "autovacuum_vacuum_cost_delay",
    "huge_pages",
)


def server_info() -> dict[str, object]:
    """What the server actually runs with (pg_settings), and whether it is the run's own cluster."""
    from common import admin_sql, pg_address

    names = ", ".join(f"'{name}'" for name in SHOWN_SETTINGS)
    rows = admin_sql(f"SELECT name, current_setting(name) FROM pg_settings WHERE name IN ({names})")
    actual = dict(sorted(rows, key=lambda row: SHOWN_SETTINGS.index(row[0])))
    # A requested setting the server did not take (a typo, a reload-only parameter) is named.
    differs = {
        name: {"requested": want, "actual": actual.get(name)}
        for name, want in SERVER_SETTINGS.items()
        if str(actual.get(name, "")).lower() != want.lower()
    }
    kind = os.environ.get("BENCH_PG_KIND", "shared")
    return {
        "kind": kind,
        "port": pg_address()[1],
        "settings": actual,
        "requested": dict(SERVER_SETTINGS) if kind == "private" else {},
        "differs": differs if kind == "private" else {},
    }


def machine(server: dict[str, object]) -> dict[str, str]:
    import psutil
    from common import admin_sql

    settings: dict[str, str] = server["settings"]  # type: ignore[assignment]
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
        "pg_settings": ", ".join(f"{k}={v}" for k, v in settings.items()),
        "pg_server": (
            f"a private cluster started for this run (initdb in a temporary directory, port {server['port']})"
            if server["kind"] == "private"
            else f"the shared server named by BENCH_PG (port {server['port']})"
        ),
        "load_before": " ".join(f"{x:.2f}" for x in os.getloadavg()),
    }


def publish(md: str, name: str, chart: Path) -> None:
    """Copy the table of this run into docs/benchmarks.md, between its result markers, and its chart
    to docs/images/benchmark-chart.png (the documentation site holds only what is under docs/)."""
    doc = ROOT / "docs" / "benchmarks.md"
    start, end = "<!-- bench:results:start -->", "<!-- bench:results:end -->"
    text = doc.read_text()
    if start not in text or end not in text:
        print("bench: docs/benchmarks.md has no result markers; left unchanged", flush=True)
        return
    body = md.split("\n", 1)[1].replace("\n## ", "\n### ")
    block = (
        f"{start}\nRun `{name}` (`bench/results/{name}.md`, raw samples in `{name}.json`).\n\n"
        f"![benchmark chart](images/benchmark-chart.png)\n{body}{end}"
    )
    shutil.copyfile(chart, ROOT / "docs" / "images" / "benchmark-chart.png")
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
        server = server_info()
        getattr(runner, phase)()
        details[phase] = {
            "kind": kind,
            "at": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
            "load_before": load_before,
            "load_after": " ".join(f"{x:.2f}" for x in os.getloadavg()),
            "busy": f"{meter.stop():.0%}",
            "plan": {k: getattr(runner.plan, k) for k in PHASE_PLAN_KEYS.get(phase, ())},
            "server": f"{server['kind']} ({', '.join(f'{k}={v}' for k, v in server['settings'].items())})",  # type: ignore[attr-defined]
        }
    data["results"] = [r for r in data["results"] if r["phase"] not in phases] + runner.records
    data["info"]["added_later"] = sorted(set(data["info"].get("added_later", [])) | set(filter(None, phases)))
    path.write_text(json.dumps(data, indent=1))
    name = path.stem
    md = write_report(data["info"], data["results"], path.with_suffix(".md"), path.with_suffix(".png"))
    if not name.endswith("-quick"):
        publish(md, name, path.with_suffix(".png"))
    print(md)


def main() -> None:
    with bench_server():
        if len(sys.argv) == 4 and sys.argv[1] == "--add":
            add_phases(sys.argv[2].split(","), Path(sys.argv[3]))
            return
        measure()


def measure() -> None:
    plan = plan_from_env()
    TMP.mkdir(parents=True, exist_ok=True)
    started = time.time()
    meter = CpuMeter()
    meter.start()
    plan_info = plan.__dict__ | {"loop": LOOP}
    server = server_info()
    info = {
        "machine": machine(server),
        "versions": versions(),
        "plan": plan_info,
        "pg": pg_url(""),
        "server": server,
    }
    print(f"bench: {json.dumps(info['plan'])}", flush=True)
    print(f"bench: PostgreSQL {info['machine']['pg_server']}: {info['machine']['pg_settings']}", flush=True)
    if server["differs"]:
        print(f"bench: WARNING settings not as requested: {server['differs']}", flush=True)
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
        publish(md, name, out / f"{name}.png")
    print(md)
    print(f"bench: wrote bench/results/{name}.md, .png and .json in {info['duration_s']} s", flush=True)


if __name__ == "__main__":
    main()
