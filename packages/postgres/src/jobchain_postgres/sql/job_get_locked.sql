-- job_get_locked: one job by id, holding its row lock until the transaction ends.
-- Plan: primary key; FOR UPDATE waits for a holder and then reads the committed row.
SELECT j.* FROM {job} AS j WHERE j.id = %(job_id)s FOR UPDATE
