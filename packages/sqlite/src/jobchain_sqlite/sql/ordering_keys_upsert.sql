-- ordering_keys_upsert: record the chain that took each ordering key last, and the one before
-- it. :keys is a JSON array of [key, last_chain_id, previous_chain_id]; updated_at is :now.
INSERT INTO {p}ordering_key (key, last_chain_id, previous_chain_id, updated_at)
SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]'), json_extract(value, '$[2]'), :now
FROM json_each(:keys)
WHERE true
ON CONFLICT (key) DO UPDATE SET
    last_chain_id = excluded.last_chain_id,
    previous_chain_id = excluded.previous_chain_id,
    updated_at = excluded.updated_at
