-- migration_record: remember one applied migration.
INSERT INTO {p}migration (name, applied_at) VALUES (:name, :applied_at)
