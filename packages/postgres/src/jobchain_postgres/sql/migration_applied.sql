-- migration_applied: the names of migrations already applied (empty before the first migrate()).
SELECT name FROM {migration} ORDER BY name
