-- migration_table_create: the table that records applied migrations (bootstraps migrate()).
CREATE TABLE IF NOT EXISTS {p}migration (
    name       TEXT NOT NULL PRIMARY KEY,
    applied_at TEXT NOT NULL
)
