-- migration_bootstrap: the schema and the migration ledger, created before any migration runs.
CREATE SCHEMA IF NOT EXISTS {schema};
CREATE TABLE IF NOT EXISTS {migration} (
    name       text PRIMARY KEY,
    applied_at timestamptz NOT NULL DEFAULT now()
);
