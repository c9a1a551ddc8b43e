-- jobs_split: the first split key of each of :parts equal slices of the (filtered) job rows in key order, the first slice excepted.
-- k1, k2 (placeholders): the split key (created_at then id, or id twice). Plan: one ordered pass over the key (job_listing_idx or the primary key, then a sort of ties), numbered;
-- returns at most (slices - 1) rows, the boundaries of balanced range partitions.
SELECT t.k1, t.k2 FROM (
    SELECT {k1} AS k1, {k2} AS k2, ROW_NUMBER() OVER (ORDER BY {k1}, {k2}) AS rn, COUNT(*) OVER () AS n
    FROM {job} j
    WHERE {where}
) t
WHERE t.rn > 1 AND ((t.rn - 1) * ?) % t.n < ?
ORDER BY t.rn
