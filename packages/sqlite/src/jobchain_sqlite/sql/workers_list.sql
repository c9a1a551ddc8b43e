-- workers_list: the registry, most recently started first (then by id). A row that reported
-- running or draining and whose alive_until passed reads as 'dead' whether or not a heartbeat
-- marked it yet; :states (a JSON array, empty for all) filters on that reported state.
SELECT * FROM (
    SELECT w.*,
           CASE WHEN w.state IN ('running', 'draining') AND w.alive_until < :now THEN 'dead'
                ELSE w.state END AS reported_state
    FROM {p}worker w
)
WHERE :states = '[]' OR reported_state IN (SELECT value FROM json_each(:states))
ORDER BY started_at DESC, id
