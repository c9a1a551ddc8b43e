"""The chaos suite: faults injected under real worker processes, and an audit afterwards.

Run it with ``make chaos`` (``JOBCHAIN_CHAOS=1``); ``JOBCHAIN_CHAOS_FULL=1`` runs the long
version (more and longer faults, and the default-settings rescue cell). Without
``JOBCHAIN_CHAOS`` every cell is skipped at collection, so ``make test`` pays nothing.

Each cell (a test) gets its own database on a private PostgreSQL cluster of the session
(``jobchain_postgres.testing.PrivateServer``; never the shared server), starts ``jobchain
worker`` processes on ``chaos_app:processors``, produces chains at a steady rate from the test
process while its fault schedule runs, waits for the queue to drain and audits:

- lost (must be 0): chains the producer committed, or jobs in the table, not ``completed``;
- double completions (must be 0): two ``chaos_audit`` rows for one job, each written by the
  handler inside its atomic attempt transaction;
- re-executions, from the per-execution log: only jobs in flight at a fault may run again,
  at most kills x concurrency (crash cells) or faults x slots (database faults), none when
  nothing crashed (broker outages, held connections);
- recovery per fault: from its end to the first completion, to the slowest worker's first
  completion, and to the completion of every chain started before it (backlog drained),
  asserted only against generous bounds stated in each test module.

Timing knobs (see ``harness.Knobs``) make a compact cell take 30-45 s: a 5 s lease, a 0.5 s
idle poll, 0.3 s of work per job inside the attempt transaction, a 0.5 s first retry.
Figures go to ``JOBCHAIN_CHAOS_RESULTS`` (default ``$TMPDIR/jobchain-chaos-results.json``)
and to a table at the end of the session.
"""
