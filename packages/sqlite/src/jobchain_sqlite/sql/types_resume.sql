-- types_resume: resume the types of :type_names (a JSON array). The rows stay (a rate
-- window may live there).
UPDATE {p}type_control SET paused_at = NULL
WHERE type_name IN (SELECT value FROM json_each(:type_names)) AND paused_at IS NOT NULL
