"""Before/after comparison of jobchain's own processing rows, interleaved in one run.

    python bench/ab.py BEFORE_DIR AFTER_DIR [--rounds 5] [--jobs 20000] [--out FILE.json]

BEFORE_DIR and AFTER_DIR are checkouts of this repository (``git worktree add /tmp/before
<commit>``). Each round runs every row once per checkout, alternating which goes first, so
a machine that gets busier or quieter during the run affects both sides alike. A side's
packages are imported from its own ``packages/*/src`` (PYTHONPATH comes before the editable
installs of the environment running this script); the workload is this checkout's
``bench/jc.py`` for both. PostgreSQL state lives in a schema per side (``bench_ab_before``,
``bench_ab_after``), dropped before every fill; SQLite in a file per side. Prints, per row,
the median jobs/s of each side and their ratio (after / before).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from benchenv import ensure_venv

if __name__ == "__main__":
    ensure_venv(__file__)

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
from common import PG_BASE  # noqa: E402

PG_DB = os.environ.get("BENCH_AB_DB", "test")
ROWS: list[tuple[str, str, int, int]] = [
    # (backend, mode, concurrency, prefetch): the rows issue 17 keeps within 5 %.
    ("postgresql", "atomic", 10, 10),
    ("postgresql", "batch/100", 10, 0),
    ("sqlite", "atomic", 10, 10),
    ("sqlite", "batch/100", 10, 0),
]
PACKAGES = ["core", "sqlite", "postgres", "redis", "nats"]


def side_env(tree: Path) -> dict[str, str]:
    paths = [str(tree / "packages" / p / "src") for p in PACKAGES]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}


def psql(sql: str) -> None:
    subprocess.run(
        ["psql", f"{PG_BASE}/{PG_DB}", "-qAtX", "-v", "ON_ERROR_STOP=1", "-c", sql],
        check=True,
        capture_output=True,
    )


def run_jc(tree: Path, *args: str) -> dict[str, object]:
    out = subprocess.run(
        [sys.executable, str(BENCH / "jc.py"), *args],
        env=side_env(tree),
        check=True,
        capture_output=True,
        text=True,
    )
    result: dict[str, object] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def state_url(backend: str, side: str, tmp: Path) -> str:
    if backend == "postgresql":
        return f"{PG_BASE}/{PG_DB}?schema=bench_ab_{side}"
    return f"sqlite:///{tmp / f'{side}.db'}"


def fresh(backend: str, side: str, tmp: Path) -> None:
    if backend == "postgresql":
        psql(f"DROP SCHEMA IF EXISTS bench_ab_{side} CASCADE")
    else:
        for path in tmp.glob(f"{side}.db*"):
            path.unlink()


def measure(
    tree: Path, side: str, row: tuple[str, str, int, int], jobs: int, tmp: Path
) -> tuple[float, float]:
    backend, mode, conc, prefetch = row
    fresh(backend, side, tmp)
    state = state_url(backend, side, tmp)
    run_jc(tree, "fill", state, str(jobs))
    if backend == "postgresql":
        psql(f"ANALYZE bench_ab_{side}.jobchain_job")
    cfg = {
        "state": state,
        "notify": "none",
        "mode": mode,
        "concurrency": conc,
        "prefetch": prefetch,
        "n": jobs,
    }
    out = run_jc(tree, "worker", json.dumps(cfg))
    return float(out["rate"]), float(out["cpu_per_1000"])  # type: ignore[arg-type]


def label(row: tuple[str, str, int, int]) -> str:
    backend, mode, conc, prefetch = row
    name = mode.replace("batch/", "batch of ")
    return f"{backend} {name} c{conc}" + (f" prefetch {prefetch}" if prefetch else "")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--jobs", type=int, default=20000)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--only", default="", help="run only rows whose label contains this text")
    args = parser.parse_args()
    sides = {"before": args.before.resolve(), "after": args.after.resolve()}
    rows = [r for r in ROWS if args.only in label(r)]
    rates: dict[str, dict[str, list[float]]] = {label(r): {"before": [], "after": []} for r in rows}
    cpus: dict[str, dict[str, list[float]]] = {label(r): {"before": [], "after": []} for r in rows}
    with tempfile.TemporaryDirectory(prefix="jobchain-ab-") as tmpdir:
        tmp = Path(tmpdir)
        for round_ in range(args.rounds):
            order = ["before", "after"] if round_ % 2 == 0 else ["after", "before"]
            for row in rows:
                for side in order:
                    rate, cpu = measure(sides[side], side, row, args.jobs, tmp)
                    rates[label(row)][side].append(rate)
                    cpus[label(row)][side].append(cpu)
                    print(
                        f"round {round_ + 1} {label(row)} {side}: {rate:,.0f} jobs/s, "
                        f"{cpu * 1000:.1f} ms CPU per 1,000 jobs",
                        flush=True,
                    )
    for side in ("before", "after"):
        psql(f"DROP SCHEMA IF EXISTS bench_ab_{side} CASCADE")
    summary = {}
    print("\nrow | before (median jobs/s) | after | after / before | CPU per job after / before")
    for name, both in rates.items():
        before, after = statistics.median(both["before"]), statistics.median(both["after"])
        cpu_before, cpu_after = (statistics.median(cpus[name][side]) for side in ("before", "after"))
        summary[name] = {
            "before": before,
            "after": after,
            "ratio": after / before,
            "runs": both,
            "cpu_per_1000": cpus[name],
            "cpu_ratio": cpu_after / cpu_before,
        }
        print(f"{name} | {before:,.0f} | {after:,.0f} | {after / before:.3f} | {cpu_after / cpu_before:.3f}")
    if args.out is not None:
        args.out.write_text(
            json.dumps({"sides": {k: str(v) for k, v in sides.items()}, "rows": summary}, indent=2)
        )


if __name__ == "__main__":
    main()
