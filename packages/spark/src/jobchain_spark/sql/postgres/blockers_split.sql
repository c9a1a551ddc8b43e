-- blockers_split: the first split key of each of :parts equal slices of the (filtered) blocker rows in key order, the first slice excepted.
-- k1, k2 (placeholders): the split key (the blocked job's created_at then job_id, or job_id twice).
SELECT t.k1, t.k2 FROM (
    SELECT {k1} AS k1, {k2} AS k2, ROW_NUMBER() OVER (ORDER BY {k1}, {k2}) AS rn, COUNT(*) OVER () AS n
    FROM {job_blocker} b
    JOIN {job} j ON j.id = b.job_id
    WHERE {where}
) t
WHERE t.rn > 1 AND mod((t.rn - 1) * %s, t.n) < %s
ORDER BY t.rn
