-- job_next_available: the earliest scheduled_at among pending jobs of the given types.
-- Paused types (type_control) are left out; type limits are not considered.
-- Plan: job_acquisition_idx (MIN per type name from the partial index).
SELECT MIN(scheduled_at) AS next_at
FROM {p}job INDEXED BY {p}job_acquisition_idx
WHERE status = 'pending' AND type_name IN (
    SELECT value FROM json_each(:type_names)
    WHERE value NOT IN (SELECT c.type_name FROM {p}type_control c WHERE c.paused_at IS NOT NULL)
)
