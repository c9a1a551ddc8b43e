"""The benchmark phases. Each measurement is one record: phase, library, config, repeat, metrics.

Order inside a repeat interleaves the libraries so that drift in the machine's load hits all
of them alike. The whole-machine CPU busy fraction is recorded with every timed phase: the
project's machine is shared, and a busy figure far above the others flags a disturbed run.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
from dataclasses import dataclass
from typing import Any

from common import (
    BENCH,
    NATS_URL,
    PYTHON,
    REDIS_URL,
    TMP,
    Child,
    CpuMeter,
    TableSampler,
    admin_sql,
    checkpoint,
    db_xacts,
    pg_address,
    pg_base,
    pg_cli,
    pg_url,
    recreate_db,
    run_child,
)
from history import insert_history, insert_pending
from multiprocess import LAYOUTS, layout_label, run_processes
from pgproxy import CountingProxy

JC_DB = "bench_jobchain"
PGQ_DB = "bench_pgqueuer"
PRO_DB = "bench_procrastinate"
REF_DB = "bench_pgbench"
HIST_DB = "bench_history"
SCHEMA = "bench"

# (mode, concurrency, prefetch, primary). Primary configurations run in every repeat; the
# others only in the first, to keep `make bench` under 30 minutes.
JC_PROCESS = [
    ("atomic", 10, 0, True),
    ("atomic", 10, 10, True),
    ("staged", 10, 10, True),
    ("staged", 10, 0, False),
    ("atomic", 20, 20, False),
    ("staged", 20, 20, False),
    ("atomic", 50, 50, False),  # bigger groups and claims: what more concurrency buys per job
    ("atomic/no-group", 10, 10, False),  # group commit off: what it buys, in the same run
    ("batch/100", 10, 0, True),  # a batch processor: up to 100 jobs per handler call
    ("batch/50", 10, 50, False),
]
SQLITE_NORMAL_SYNC = [("atomic", 10, 10), ("batch/100", 10, 0)]
"""SQLite configurations measured once more with ``?synchronous=normal``."""
BEST_JC = ("atomic", 10, 10)  # the history and long-run phases use this configuration
# (batch_size, max_concurrent_tasks, primary): cap 10 forces batch <= 5; batch 10 cap 20 was its best.
PGQ_PROCESS = [(5, 10, True), (10, 20, True)]
PRO_PROCESS = [(10, True), (20, False)]


# The plan fields each phase reads; `run.py --add` records their values with the phase.
PHASE_PLAN_KEYS = {
    "latency": ("latency", "latency_other"),
    "wake_hints": ("wake_jobs",),
    "rss": ("rss_jobs", "rss_seconds"),
    "processes": ("jobs",),
}


def jc_label(mode: str, conc: int, prefetch: int) -> str:
    name = mode.replace("batch/", "batch of ") if mode.startswith("batch/") else mode
    return f"{name} c{conc}" + (f" prefetch {prefetch}" if prefetch else "")


@dataclass
class Plan:
    repeats: int
    jobs: int
    single: int
    latency: int
    latency_other: int
    history: int
    rss_jobs: int
    rss_seconds: int
    budget: int
    quick: bool
    wake_jobs: int = 500


def jc_state(db: str = JC_DB, port: int | None = None) -> str:
    base = pg_base() if port is None else re.sub(r":\d+$", f":{port}", pg_base())
    return f"{base}/{db}?schema={SCHEMA}"


def jc_notify(db: str = JC_DB, port: int | None = None) -> str:
    return pg_url(db) if port is None else pg_url(db, f"127.0.0.1:{port}")


def sqlite_url() -> str:
    return f"sqlite:///{TMP / 'bench.db'}"


def jc_worker(
    state: str, notify: str, mode: str, conc: int, prefetch: int, n: int, **extra: Any
) -> list[str]:
    cfg = {"state": state, "notify": notify, "mode": mode, "concurrency": conc, "prefetch": prefetch, "n": n}
    return ["bench/jc.py", "worker", json.dumps(cfg | extra)]


class Runner:
    def __init__(self, plan: Plan) -> None:
        self.plan = plan
        self.records: list[dict[str, Any]] = []
        self.t0 = time.monotonic()

    # ------------------------------------------------------------ plumbing

    def record(self, phase: str, lib: str, config: str, rep: int, **metrics: Any) -> None:
        rec = {"phase": phase, "lib": lib, "config": config, "rep": rep, **metrics}
        self.records.append(rec)
        shown = {k: (round(v, 3) if isinstance(v, float) else v) for k, v in metrics.items()}
        shown.pop("samples_ms", None)
        print(f"  {phase:8} {lib:15} {config:28} rep {rep}: {json.dumps(shown)[:150]}", flush=True)

    def timed(self, args: list[str], timeout: float = 1500) -> dict[str, Any]:
        meter = CpuMeter()
        meter.start()
        child = Child([PYTHON, *args])
        out = child.finish(timeout)
        out["peak_rss"] = max(child.peak_rss, out.get("peak_rss", 0))
        out["machine_busy"] = meter.stop()
        return out

    def run_all(self) -> list[dict[str, Any]]:
        """Every figure gets one sample first; further repeats fill what is left of the budget."""
        self.t0 = time.monotonic()
        steps = [
            ("references", self.references),
            ("repeat 1", lambda: self.repeat(0)),
            ("processes", self.processes),
            ("round trips", self.round_trips),
            ("latency", self.latency),
            ("wake hints", self.wake_hints),
            ("history", self.history),
            ("rss", self.rss),
            ("profile", self.profile),
            ("scheduling", self.scheduling),
            ("more repeats", self.more_repeats),
        ]
        for name, step in steps:
            t0 = time.monotonic()
            print(f"bench: {name} (at {t0 - self.t0:.0f} s)", flush=True)
            try:
                step()
            except Exception as exc:
                print(f"bench: phase {name} FAILED: {exc!r}", flush=True)
                self.records.append({"phase": "error", "lib": name, "config": repr(exc)[:300], "rep": 0})
            print(f"bench: {name} took {time.monotonic() - t0:.0f} s", flush=True)
        return self.records

    # ------------------------------------------------------------ references

    def references(self) -> None:
        recreate_db(REF_DB)
        pgbench = shutil.which("pgbench")
        if pgbench is None:
            raise RuntimeError("pgbench not found (apt-get install postgresql-client)")
        server = pg_cli()
        base = [pgbench, *server]
        subprocess.run([*base, "-i", "-s", "1", "-q", REF_DB], check=True, capture_output=True)

        def run(script: str, *options: str) -> tuple[float, float]:
            checkpoint()
            return self._pgbench([*base, *options, "-n", "-f", str(BENCH / "pgbench" / script), REF_DB])

        for rep in range(self.plan.repeats):
            tps, busy = run("update.sql", "-c", "10", "-j", "2", "-T", "5" if self.plan.quick else "10")
            self.record("ref", "pgbench", "update", rep, rate=tps, machine_busy=busy)
            subprocess.run(
                ["psql", *server, "-q", "-d", REF_DB, "-f", str(BENCH / "pgbench" / "skiplocked_setup.sql")],
                check=True,
                capture_output=True,
            )
            tps, busy = run("skiplocked_claim.sql", "-c", "10", "-j", "2", "-t", "2000")
            self.record("ref", "pgbench", "skip-locked", rep, rate=tps, machine_busy=busy)
            # One client, one single-row INSERT per autocommit transaction: what one-at-a-time
            # starts from one client could reach on this server (a commit and its WAL flush each).
            admin_sql(
                "DROP TABLE IF EXISTS one_insert; "
                "CREATE TABLE one_insert (id bigserial PRIMARY KEY, payload jsonb)",
                REF_DB,
            )
            tps, busy = run("insert_one.sql", "-c", "1", "-j", "1", "-T", "5", "-M", "prepared")
            self.record("ref", "pgbench", "insert-one-client", rep, rate=tps, machine_busy=busy)

    @staticmethod
    def _pgbench(argv: list[str]) -> tuple[float, float]:
        meter = CpuMeter()
        meter.start()
        out = subprocess.run(argv, check=True, capture_output=True, text=True).stdout
        busy = meter.stop()
        match = re.search(r"tps = ([\d.]+)", out)
        if match is None:
            raise RuntimeError(f"pgbench printed no tps: {out[-500:]}")
        return float(match.group(1)), busy

    # ------------------------------------------------------------ start + process

    def repeat(self, rep: int) -> float:
        t0 = time.monotonic()
        self.jobchain_pg(rep)
        self.pgqueuer(rep)
        self.procrastinate(rep)
        self.jobchain_sqlite(rep)
        self.memory(rep)
        return time.monotonic() - t0

    def more_repeats(self) -> None:
        last = None
        for rep in range(1, self.plan.repeats):
            left = self.plan.budget - (time.monotonic() - self.t0)
            # A further repeat (primary configurations only) takes about 60 % of the first.
            if left < (last or 0) or (last is None and left < 0.6 * self._first_repeat):
                print(f"bench: repeat {rep + 1} skipped: {left:.0f} s of the budget left", flush=True)
                self.records.append(
                    {"phase": "skipped", "lib": f"repeat {rep + 1}", "config": "", "rep": rep}
                )
                continue
            print(f"bench: repeat {rep + 1}/{self.plan.repeats}", flush=True)
            last = self.repeat(rep)

    _first_repeat = 0.0

    def _starts(self, lib: str, rep: int, argv: list[str], clear: Any) -> None:
        """single, batch of 100, batch of 1,000 (the last batch run's jobs are left for processing);
        jobchain also starts single chains in autocommit (the INSERT is the whole transaction) and
        through jobchain.sync."""
        n = self.plan.jobs
        extra = [
            ("single autocommit", "single-autocommit", self.plan.single, 1),
            # jobchain.sync: the same start from synchronous code (issue 20: <= 1.3x the async cost).
            ("single sync", "single-sync", self.plan.single, 1),
        ]
        for config, how, count, batch in (
            ("single", "single", self.plan.single, 1),
            *(extra if lib.startswith("jobchain") else []),
            ("batch 100", "batch", n, 100),
            ("batch 1000", "batch", n, 1000),
        ):
            clear()
            checkpoint()
            out = self.timed([*argv, how, str(count), str(batch)])
            self.record("start", lib, config, rep, **out)

    def _process(
        self, lib: str, config: str, rep: int, db: str, argv: list[str], phase: str = "process"
    ) -> None:
        checkpoint()
        before = db_xacts(db)
        out = self.timed(argv)
        time.sleep(0.5)  # exited backends have reported their statistics by now
        out["xacts_per_job"] = (db_xacts(db) - before) / max(1, out["n"])
        self.record(phase, lib, config, rep, **out)

    def _jc_fresh(self) -> str:
        recreate_db(JC_DB)
        state = jc_state()
        run_child(["bench/jc.py", "fill", state, "1"])  # migrates
        self._jc_clear()
        return state

    @staticmethod
    def _jc_clear() -> None:
        admin_sql(f"TRUNCATE {SCHEMA}.jobchain_job_blocker, {SCHEMA}.jobchain_job", JC_DB)

    def jobchain_pg(self, rep: int) -> None:
        t0 = time.monotonic()
        state = self._jc_fresh()
        self._starts("jobchain-pg", rep, ["bench/jc.py", "start", state, jc_notify()], self._jc_clear)
        configs = [c for c in JC_PROCESS if rep == 0 or c[3]]
        for index, (mode, conc, prefetch, _) in enumerate(configs):
            if index:
                self._jc_clear()
                run_child(["bench/jc.py", "fill", state, str(self.plan.jobs)])
            admin_sql(f"ANALYZE {SCHEMA}.jobchain_job", JC_DB)
            argv = jc_worker(state, jc_notify(), mode, conc, prefetch, self.plan.jobs)
            self._process("jobchain-pg", jc_label(mode, conc, prefetch), rep, JC_DB, argv)
        if rep == 0:
            self._first_repeat += time.monotonic() - t0

    def pgqueuer(self, rep: int) -> None:
        t0 = time.monotonic()
        recreate_db(PGQ_DB)
        run_child(["bench/peer_pgqueuer.py", "install", PGQ_DB])
        clear = lambda: admin_sql("TRUNCATE pgqueuer, pgqueuer_log", PGQ_DB)  # noqa: E731
        self._starts("pgqueuer", rep, ["bench/peer_pgqueuer.py", "start", PGQ_DB], clear)
        for index, (batch, cap, _) in enumerate(c for c in PGQ_PROCESS if rep == 0 or c[2]):
            if index:
                clear()
                run_child(["bench/peer_pgqueuer.py", "start", PGQ_DB, "batch", str(self.plan.jobs), "1000"])
            admin_sql("ANALYZE pgqueuer", PGQ_DB)
            cfg = {"db": PGQ_DB, "n": self.plan.jobs, "batch_size": batch, "max_concurrent_tasks": cap}
            argv = ["bench/peer_pgqueuer.py", "worker", json.dumps(cfg)]
            self._process("pgqueuer", f"batch {batch} cap {cap}", rep, PGQ_DB, argv)
        if rep == 0:
            self._first_repeat += time.monotonic() - t0

    def procrastinate(self, rep: int) -> None:
        t0 = time.monotonic()
        recreate_db(PRO_DB)
        run_child(["bench/peer_procrastinate.py", "install", PRO_DB])
        clear = lambda: admin_sql("TRUNCATE procrastinate_jobs CASCADE", PRO_DB)  # noqa: E731
        self._starts("procrastinate", rep, ["bench/peer_procrastinate.py", "start", PRO_DB], clear)
        for index, (conc, _) in enumerate(c for c in PRO_PROCESS if rep == 0 or c[1]):
            if index:
                clear()
                run_child(
                    ["bench/peer_procrastinate.py", "start", PRO_DB, "batch", str(self.plan.jobs), "1000"]
                )
            admin_sql("ANALYZE procrastinate_jobs", PRO_DB)
            cfg = {"db": PRO_DB, "n": self.plan.jobs, "concurrency": conc}
            argv = ["bench/peer_procrastinate.py", "worker", json.dumps(cfg)]
            self._process("procrastinate", f"c{conc}", rep, PRO_DB, argv)
        if rep == 0:
            self._first_repeat += time.monotonic() - t0

    def jobchain_sqlite(self, rep: int) -> None:
        t0 = time.monotonic()
        for path in TMP.glob("bench.db*"):
            path.unlink()
        state = sqlite_url()
        run_child(["bench/jc.py", "fill", state, "1"])

        def clear() -> None:
            import sqlite3

            with sqlite3.connect(TMP / "bench.db") as conn:
                conn.execute("DELETE FROM jobchain_job_blocker")
                conn.execute("DELETE FROM jobchain_job")

        self._starts("jobchain-sqlite", rep, ["bench/jc.py", "start", state, "none"], clear)
        configs = [c for c in JC_PROCESS if rep == 0 or c[3]]
        for index, (mode, conc, prefetch, _) in enumerate(configs):
            if index:
                clear()
                run_child(["bench/jc.py", "fill", state, str(self.plan.jobs)])
            out = self.timed(jc_worker(state, "none", mode, conc, prefetch, self.plan.jobs))
            self.record("process", "jobchain-sqlite", jc_label(mode, conc, prefetch), rep, **out)
        if rep == 0:
            # The documented faster durability setting (docs/adapters/sqlite.md), once each.
            for mode, conc, prefetch in SQLITE_NORMAL_SYNC:
                clear()
                run_child(["bench/jc.py", "fill", state, str(self.plan.jobs)])
                argv = jc_worker(f"{state}?synchronous=normal", "none", mode, conc, prefetch, self.plan.jobs)
                label = jc_label(mode, conc, prefetch) + ", synchronous=normal"
                self.record("process", "jobchain-sqlite", label, rep, **self.timed(argv))
            self._first_repeat += time.monotonic() - t0

    def memory(self, rep: int) -> None:
        for mode, prefetch in (("atomic", 10), ("staged", 10)):
            out = self.timed(["bench/jc.py", "memory", str(self.plan.jobs), "10", mode, str(prefetch)])
            busy = out.pop("machine_busy")
            if mode == "atomic":
                for key, config in (("start_single", "single"), ("start_batch_100", "batch 100")):
                    self.record("start", "jobchain-memory", config, rep, rate=out[key], machine_busy=busy)
                self.record(
                    "start",
                    "jobchain-memory",
                    "batch 1000",
                    rep,
                    rate=out["start_batch_1000"],
                    machine_busy=busy,
                )
            self.record(
                "process",
                "jobchain-memory",
                jc_label(mode, 10, prefetch),
                rep,
                rate=out["process"],
                cpu_per_1000=out["cpu_per_1000"],
                peak_rss=out["peak_rss"],
                machine_busy=busy,
            )

    # ------------------------------------------------------------ several worker processes, one database

    def processes(self) -> None:
        """1, 2 and 4 worker processes with the single-process row's total concurrency
        (bench/multiprocess.py), interleaved, each over a fresh fill of the plan's jobs."""
        state = self._jc_fresh()
        for rep in range(1 if self.plan.quick else 2):
            for count in (1, 2, 4):
                self._jc_clear()
                run_child(["bench/jc.py", "fill", state, str(self.plan.jobs)])
                admin_sql(f"ANALYZE {SCHEMA}.jobchain_job", JC_DB)
                checkpoint()
                out = run_processes(state, jc_notify(), JC_DB, SCHEMA, self.plan.jobs, LAYOUTS[count])
                self.record("processes", "jobchain-pg", layout_label(LAYOUTS[count]), rep, **out)

    # ------------------------------------------------------------ round trips through the counting proxy

    def round_trips(self) -> None:
        n = min(self.plan.jobs, 2000)
        host, port, _ = pg_address()
        with CountingProxy(host, port) as proxy:
            port_db = f"127.0.0.1:{proxy.port}"
            recreate_db(JC_DB)
            state, notify = jc_state(port=proxy.port), jc_notify(port=proxy.port)
            run_child(["bench/jc.py", "fill", state, "1"])
            for mode, conc, prefetch, primary in JC_PROCESS:
                if not primary:
                    continue
                run_child(["bench/jc.py", "fill", state, str(n)])
                proxy.reset()
                run_child(jc_worker(state, notify, mode, conc, prefetch, n))
                self.record(
                    "rtt",
                    "jobchain-pg",
                    jc_label(mode, conc, prefetch),
                    0,
                    per_job=proxy.round_trips / n,
                    counts=dict(proxy.counts),
                )
            for how, count, batch in (("single", 200, 1), ("batch", 2000, 1000)):
                proxy.reset()
                run_child(["bench/jc.py", "start", state, notify, how, str(count), str(batch)])
                label = f"start {how}" + (f" {batch}" if how == "batch" else "")
                self.record(
                    "rtt",
                    "jobchain-pg",
                    label,
                    0,
                    per_job=proxy.round_trips / count,
                    counts=dict(proxy.counts),
                )

            recreate_db(PGQ_DB)
            run_child(["bench/peer_pgqueuer.py", "install", PGQ_DB])
            for batch, cap, _ in PGQ_PROCESS:
                run_child(["bench/peer_pgqueuer.py", "start", PGQ_DB, "batch", str(n), "1000"])
                proxy.reset()
                cfg = {
                    "db": PGQ_DB,
                    "n": n,
                    "batch_size": batch,
                    "max_concurrent_tasks": cap,
                    "host": port_db,
                }
                run_child(["bench/peer_pgqueuer.py", "worker", json.dumps(cfg)])
                self.record(
                    "rtt",
                    "pgqueuer",
                    f"batch {batch} cap {cap}",
                    0,
                    per_job=proxy.round_trips / n,
                    counts=dict(proxy.counts),
                )

            recreate_db(PRO_DB)
            run_child(["bench/peer_procrastinate.py", "install", PRO_DB])
            run_child(["bench/peer_procrastinate.py", "start", PRO_DB, "batch", str(n), "1000"])
            proxy.reset()
            cfg = {"db": PRO_DB, "n": n, "concurrency": 10, "host": port_db}
            run_child(["bench/peer_procrastinate.py", "worker", json.dumps(cfg)])
            self.record(
                "rtt", "procrastinate", "c10", 0, per_job=proxy.round_trips / n, counts=dict(proxy.counts)
            )

    # ------------------------------------------------------------ wake-up latency

    def latency(self) -> None:
        n, other, gap = self.plan.latency, self.plan.latency_other, 0.01
        state = self._jc_fresh()
        cases = [
            ("postgres LISTEN/NOTIFY", jc_notify(), 60.0, n),
            ("redis", REDIS_URL + "?prefix=jcbench", 60.0, n),
            ("nats", NATS_URL + "?prefix=jcbench", 60.0, n),
            ("polling every 0.05 s", "none", 0.05, other),
        ]
        for name, notify, poll, count in cases:
            out = self.timed(["bench/jc.py", "latency", state, notify, str(poll), str(count), str(gap)])
            self.record("latency", "jobchain-pg", name, 0, **out)
        recreate_db(PGQ_DB)
        run_child(["bench/peer_pgqueuer.py", "install", PGQ_DB])
        out = self.timed(["bench/peer_pgqueuer.py", "latency", PGQ_DB, str(other), str(gap)])
        self.record("latency", "pgqueuer", "postgres LISTEN/NOTIFY", 0, **out)
        recreate_db(PRO_DB)
        run_child(["bench/peer_procrastinate.py", "install", PRO_DB])
        out = self.timed(["bench/peer_procrastinate.py", "latency", PRO_DB, str(other), str(gap)])
        self.record("latency", "procrastinate", "postgres LISTEN/NOTIFY", 0, **out)

    # ------------------------------------------------------------ acquisitions per job, 8 idle workers

    def wake_hints(self) -> None:
        """Claims per started chain with 8 idle workers, with and without wake hints.

        Eight workers (concurrency 1, one Client and one notify adapter each) in one process
        share one state database; ``bench/wake_hints.py`` counts their ``jobs_acquire`` calls.
        The brokers pair with SQLite (the state those brokers exist for); PostgreSQL pairs with
        its own LISTEN/NOTIFY, which keeps no hint budget.
        """
        n, tag = self.plan.wake_jobs, f"jcwake{int(time.time())}"
        sqlite = f"sqlite:///{TMP / 'wake.db'}"
        kv = "kv_bucket=jobchain_bench&kv_create=true"
        cases = [
            ("jobchain-sqlite", "redis, wake hints", sqlite, f"{REDIS_URL}?prefix={tag}r"),
            ("jobchain-sqlite", "nats + KV bucket, wake hints", sqlite, f"{NATS_URL}?prefix={tag}k&{kv}"),
            ("jobchain-sqlite", "nats, no bucket (no hints)", sqlite, f"{NATS_URL}?prefix={tag}n"),
            ("jobchain-pg", "postgres LISTEN/NOTIFY (no hints)", "", jc_notify()),
        ]
        TMP.mkdir(parents=True, exist_ok=True)
        for lib, config, state, notify in cases:
            if state:
                for path in TMP.glob("wake.db*"):
                    path.unlink()
            else:
                state = self._jc_fresh()
            cfg = {"state": state, "notify": notify, "n": n, "workers": 8, "gap": 0.05, "poll_interval": 30}
            out = self.timed(["bench/wake_hints.py", json.dumps(cfg)])
            self.record("wake_hints", lib, config, 0, **out)

    # ------------------------------------------------------------ scheduling controls

    def scheduling(self) -> None:
        """The plain atomic row next to priorities, 1,000 ordering keys and a max_running limit.

        ``bench/scheduling.py`` interleaves the variants (2 rounds) on PostgreSQL and SQLite;
        each variant processes a freshly filled store of the plan's job count.
        """
        out_path = TMP / "scheduling.json"
        TMP.mkdir(parents=True, exist_ok=True)
        jobs = str(self.plan.jobs)
        subprocess.run(
            [PYTHON, "bench/scheduling.py", "--rounds", "2", "--jobs", jobs, "--out", str(out_path)],
            check=True,
            timeout=1800,
        )
        summary = json.loads(out_path.read_text())["summary"]
        for backend, variants in summary.items():
            for variant, figures in variants.items():
                self.record("scheduling", f"jobchain-{backend}", variant, 0, **figures)

    # ------------------------------------------------------------ history scale and long-run memory

    def history(self) -> None:
        """Empty table vs 1,000,000 completed rows, in two databases, runs alternating."""
        mode, conc, prefetch = BEST_JC
        empty = self._jc_fresh()
        recreate_db(HIST_DB)
        full = jc_state(HIST_DB)
        run_child(["bench/jc.py", "fill", full, "1"])
        admin_sql(f"TRUNCATE {SCHEMA}.jobchain_job_blocker, {SCHEMA}.jobchain_job", HIST_DB)
        t0 = time.monotonic()
        insert_history(HIST_DB, SCHEMA, self.plan.history)
        print(
            f"  history: {self.plan.history:,} completed jobs inserted in {time.monotonic() - t0:.0f} s",
            flush=True,
        )
        for rep in range(1 if self.plan.quick else 2):
            for db, state, rows in ((JC_DB, empty, 0), (HIST_DB, full, self.plan.history)):
                run_child(["bench/jc.py", "fill", state, str(self.plan.jobs)])
                admin_sql(f"VACUUM ANALYZE {SCHEMA}.jobchain_job", db)
                argv = jc_worker(state, jc_notify(db), mode, conc, prefetch, self.plan.jobs)
                config = f"{jc_label(mode, conc, prefetch)}, {rows:,} completed rows"
                self._process("jobchain-pg", config, rep, db, argv, phase="history")
        admin_sql(f"DROP DATABASE IF EXISTS {HIST_DB} WITH (FORCE)")

    def rss(self) -> None:
        """The long run (issue 21's backlog row, and the worker's memory over a million jobs).

        The best mode processes a backlog that never falls below ``rss_jobs`` pending jobs for
        ``rss_seconds`` from its first handler: ``rss_jobs`` plus what the worker can reach in
        that window at 1.5x the rate repeat 1 measured are inserted first (untimed). The job
        table's ``pg_stat_user_tables`` row is sampled every few seconds meanwhile (dead tuples,
        HOT updates, autovacuum runs, size); the report sets the window's jobs/s against the same
        mode's figure on ``jobs`` jobs from this run.
        """
        state = self._jc_fresh()
        mode, conc, prefetch = BEST_JC
        rates = [
            r["rate"]
            for r in self.records
            if r["phase"] == "process" and r["lib"] == "jobchain-pg" and r["config"] == jc_label(*BEST_JC)
        ]
        reach = int(max(rates, default=5000) * self.plan.rss_seconds * 1.5) + 1000
        n = self.plan.rss_jobs + reach
        t0 = time.monotonic()
        insert_pending(JC_DB, SCHEMA, n)
        admin_sql(f"VACUUM ANALYZE {SCHEMA}.jobchain_job", JC_DB)
        print(f"  rss: {n:,} pending jobs inserted and vacuumed in {time.monotonic() - t0:.0f} s", flush=True)
        checkpoint()
        marks = sorted(
            {m for m in (1000, 10_000, 20_000, 50_000, 100_000, 200_000, 500_000, 1_000_000, n) if m <= n}
        )
        argv = jc_worker(
            state,
            jc_notify(),
            mode,
            conc,
            prefetch,
            n,
            rss_marks=marks,
            max_seconds=self.plan.rss_seconds,
            timeline=max(1, self.plan.rss_seconds // 30),
        )
        every = 2.0 if self.plan.quick else 5.0
        with TableSampler(JC_DB, SCHEMA, "jobchain_job", every=every) as sampler:
            out = self.timed(argv, timeout=self.plan.rss_seconds + 600)
        pending = admin_sql(f"SELECT count(*) FROM {SCHEMA}.jobchain_job WHERE status = 'pending'", JC_DB)
        out |= {"backlog_start": n, "backlog_end": int(pending[0][0]), **sampler.summary()}
        out["timeline_every_s"] = max(1, self.plan.rss_seconds // 30)
        label = f"{jc_label(mode, conc, prefetch)}, {n:,} pending at start, {self.plan.rss_seconds} s"
        self.record("rss", "jobchain-pg", label, 0, **out)

    # ------------------------------------------------------------ where the worker's CPU goes

    def profile(self) -> None:
        """The best PostgreSQL and SQLite configurations under cProfile (CPU clock), 2,000 jobs."""
        n = min(self.plan.jobs, 2000)
        mode, conc, prefetch = BEST_JC
        state = self._jc_fresh()
        run_child(["bench/jc.py", "fill", state, str(n)])
        cfg = json.loads(jc_worker(state, jc_notify(), mode, conc, prefetch, n)[-1])
        out = run_child(["bench/profile_worker.py", json.dumps(cfg)])
        self.record("profile", "jobchain-pg", jc_label(mode, conc, prefetch), 0, **out)
        for path in TMP.glob("bench.db*"):
            path.unlink()
        run_child(["bench/jc.py", "fill", sqlite_url(), str(n)])
        cfg = json.loads(jc_worker(sqlite_url(), "none", mode, conc, prefetch, n)[-1])
        out = run_child(["bench/profile_worker.py", json.dumps(cfg)])
        self.record("profile", "jobchain-sqlite", jc_label(mode, conc, prefetch), 0, **out)
