"""The chaos suite: faults injected under real worker processes, and an audit afterwards.

Compact cells run in every ``make test`` (one xdist group, serially, about two minutes on a
quiet 2-core machine); ``JOBCHAIN_CHAOS=0`` skips them, ``JOBCHAIN_CHAOS=1`` adds the cells
that did not fit that budget (``chaos_extra``: the fast restart, connections held without a
terminate), and ``JOBCHAIN_CHAOS_FULL=1`` runs the long version: more and longer faults.
``make chaos`` sets both, writes ``bench/results/chaos-<date>.{json,md}`` and refreshes the
"Failure modes" section of ``docs/benchmarks.md`` (``bench/chaos_report.py``).

Each cell (a test) gets its own database on a private PostgreSQL cluster of the session
(``jobchain_postgres.testing.PrivateServer``; never the shared server), starts ``jobchain
worker`` processes on ``chaos_app:processors``, produces chains at a steady rate from the test
process while its fault schedule runs (and a little after), waits for the queue to drain and
audits:

- lost (must be 0): chains the producer committed, or jobs in the table, not ``completed``;
- double completions (must be 0): two ``chaos_audit`` rows for one job, each written by the
  handler inside its atomic attempt transaction;
- re-executions, from the per-execution log: only jobs in flight at a fault may run again,
  at most kills x concurrency (crash cells) or faults x slots (database faults), none when
  nothing crashed (broker outages, held connections);
- recovery per fault: from its end to the first completion, to the slowest worker's first
  completion, and to the completion of every chain started before it (backlog drained);
  after a kill, until each killed job began running again, per job type.

Bounds are derived from each cell's settings (``cells.CellPlan``): a killed job must run again
within its lease or the worker's death (``interval * missed`` heartbeats), plus one heartbeat
and ``RESCUE_SLACK``; a backlog must drain within twice the fault, the loop's longest recovery
backoff, a lease and the backlog's drain time, plus 10 s. Compact knobs (``harness.Knobs``): a
3 s lease, a 0.5 s idle poll, 0.3 s of work per job inside the attempt transaction, a 0.5 s
first retry; the default-settings cell sets none of them. Figures go to
``JOBCHAIN_CHAOS_RESULTS`` (default ``$TMPDIR/jobchain-chaos-results.json``) and, without
xdist, to a table at the end of the session.
"""
