DROP TABLE IF EXISTS queue;
CREATE TABLE queue (id bigserial PRIMARY KEY, status integer NOT NULL DEFAULT 0, payload jsonb);
INSERT INTO queue (payload) SELECT '{}'::jsonb FROM generate_series(1, 20000);
CREATE INDEX queue_pending ON queue (id) WHERE status = 0;
VACUUM ANALYZE queue;
