-- migration_lock: serialize migrate() across processes for this schema and prefix, until the tx ends.
SELECT pg_advisory_xact_lock(hashtextextended(%(key)s, 0))
