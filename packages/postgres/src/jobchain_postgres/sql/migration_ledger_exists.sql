-- migration_ledger_exists: whether the migration ledger table exists (before the first migrate()).
SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_tables WHERE schemaname = %(schema)s AND tablename = %(table)s)
