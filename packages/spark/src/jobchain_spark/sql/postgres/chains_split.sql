-- chains_split: the first split key of each of :parts equal slices of the (filtered) chain roots in key order, the first slice excepted.
-- k1, k2 (placeholders): the split key (created_at then id, or id twice). Plan: job_listing_idx keeping roots (chain_index = 0), or the id key.
SELECT t.k1, t.k2 FROM (
    SELECT {k1} AS k1, {k2} AS k2, ROW_NUMBER() OVER (ORDER BY {k1}, {k2}) AS rn, COUNT(*) OVER () AS n
    FROM {job} r
    WHERE r.chain_index = 0 AND {where}
) t
WHERE t.rn > 1 AND mod((t.rn - 1) * %s, t.n) < %s
ORDER BY t.rn
