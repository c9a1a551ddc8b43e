-- migration_list: names of the applied migrations.
SELECT name FROM {p}migration ORDER BY name
