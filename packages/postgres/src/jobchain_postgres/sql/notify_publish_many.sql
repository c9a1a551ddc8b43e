-- notify_publish_many: send several notifications in one statement (and one transaction), in
-- the given order. PostgreSQL drops duplicates (same channel and payload) within a transaction,
-- which is what a wake-up or a completion notice needs anyway.
SELECT pg_notify(n.channel, n.payload)
FROM unnest(%(channels)s::text[], %(payloads)s::text[]) WITH ORDINALITY AS n(channel, payload, position)
ORDER BY n.position
