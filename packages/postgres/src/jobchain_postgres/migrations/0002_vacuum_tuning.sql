-- 0002_vacuum_tuning: room for HOT updates and eager per-table autovacuum.
-- Jobs are updated in place several times (pending → running → completed, lease renewals);
-- 25% free space per page lets most of those be HOT updates that add no index entries.
ALTER TABLE {job} SET (
    fillfactor = 75,
    autovacuum_vacuum_scale_factor = 0.02,
    autovacuum_analyze_scale_factor = 0.02,
    autovacuum_vacuum_cost_delay = 0
);

-- Blockers are inserted and deleted, never updated: no fillfactor, only unthrottled vacuum.
ALTER TABLE {job_blocker} SET (autovacuum_vacuum_cost_delay = 0);
