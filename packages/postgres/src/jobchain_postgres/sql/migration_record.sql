-- migration_record: note that a migration has been applied.
INSERT INTO {migration} (name) VALUES (%(name)s)
