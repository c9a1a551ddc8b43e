-- 0009_hot_path: fewer index entries per job on the hot path (issue 21, PostgreSQL at scale).
--
-- Every claim and completion changes status, so neither is a HOT update: each inserts an entry
-- into every index of the job table. A pending root entered 8 of them, a completion 10. After
-- this migration a pending root enters 5 (primary key, chain_index, acquisition, listing,
-- listing by type) and a completion 6.
--
-- 1. No self-referencing foreign key on chain_id: a root has chain_id = id (the CHECK keeps it),
--    and jobs_create adds a continuation only after reading (FOR KEY SHARE) the root it
--    continues, reporting a missing chain itself (ChainNotFoundError, nothing written): the
--    same lock the foreign key's check took. The job_blocker foreign keys stay (rare rows).
--    Its name is whatever CREATE TABLE chose: found in the catalog, not spelled here.
DO $$
DECLARE
    fk name;
BEGIN
    FOR fk IN
        SELECT k.conname
        FROM pg_constraint AS k
        WHERE k.conrelid = '{job}'::regclass AND k.confrelid = '{job}'::regclass AND k.contype = 'f'
    LOOP
        EXECUTE format('ALTER TABLE %s DROP CONSTRAINT %I', '{job}'::regclass, fk);
    END LOOP;
END
$$;

-- 2, 3. chains_list walks job_listing_idx (or job_listing_type_name_idx: a root's type_name is
--    its chain_type_name) keeping chain_index = 0; no index of roots only.
DROP INDEX IF EXISTS {schema}.{job_chain_listing_idx};
DROP INDEX IF EXISTS {schema}.{job_chain_listing_type_name_idx};

-- 4. Status listings and retention by status only for the rare statuses (blocked, running,
--    failed, cancelled): pending and completed jobs, the plentiful ones, are found through
--    job_listing_idx, job_acquisition_idx and job_finished_idx. The predicate names the two
--    statuses left out, both from 0001: in an upgrade from before 0006 this runs in the
--    transaction that added failed and cancelled to the enum, which cannot use them yet.
--    Building it reads the table under a SHARE lock (writes wait; reads go on): about a second
--    per million jobs. Dropping the three indexes and the constraint takes an ACCESS EXCLUSIVE
--    lock for milliseconds (no rows are read).
DROP INDEX IF EXISTS {schema}.{job_listing_status_idx};
CREATE INDEX {job_listing_status_idx} ON {job} (status, created_at DESC, id DESC)
    WHERE status NOT IN ('pending', 'completed');
