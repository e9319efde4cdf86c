-- A fence trigger that is merely ENABLEd fires only in "origin" sessions: a writer running with
-- session_replication_role = replica (logical replication apply, some bulk loaders) skips it and
-- could write into a fenced community. The catalog scan now accepts a tenant table only when its
-- buzz_write_fence fires in every session, so every fence trigger that is enabled the default way
-- becomes ENABLE ALWAYS here: on each table that owns one (a partitioned parent passes the setting
-- to its partitions; an inheritance child has its own trigger and is altered on its own).
-- Triggers deliberately disabled or made replica-only are left as they are: the scan refuses them.
DO $$
DECLARE
    fenced regclass;
BEGIN
    FOR fenced IN
        SELECT t.tgrelid::regclass
          FROM pg_catalog.pg_trigger t
         WHERE t.tgname = 'buzz_write_fence'
           AND t.tgfoid = 'buzz.refuse_fenced_write()'::regprocedure
           AND t.tgenabled = 'O'
         ORDER BY t.tgparentid <> 0, t.tgrelid
    LOOP
        IF EXISTS (SELECT 1 FROM pg_catalog.pg_trigger t
                    WHERE t.tgrelid = fenced AND t.tgname = 'buzz_write_fence'
                      AND t.tgenabled = 'O') THEN
            EXECUTE format('ALTER TABLE %s ENABLE ALWAYS TRIGGER buzz_write_fence', fenced);
        END IF;
    END LOOP;
END
$$;
