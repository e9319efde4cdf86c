-- The purge's lock-and-check (issue 28): each batch locks its rows FOR UPDATE before counting
-- the rows of other owners that reference them, so no neighbour can add a reference between the
-- count and the delete. A row lock needs UPDATE privilege, which the worker must not have (it may
-- only SELECT and DELETE tenant rows), so the owner grants exactly the lock through this
-- function: it locks rows by ctid in one relation the calling login may DELETE from, and nothing
-- else. The locks belong to the caller's transaction.
CREATE FUNCTION buzz.lock_rows_for_deletion(rel regclass, row_ids text[]) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog AS $$
DECLARE
    locked bigint;
BEGIN
    IF NOT pg_catalog.has_table_privilege(session_user, rel, 'DELETE') THEN
        RAISE EXCEPTION USING ERRCODE = '42501',
            MESSAGE = format('%s may not delete from %s, so it may not lock its rows', session_user, rel);
    END IF;
    EXECUTE format('SELECT count(*) FROM (SELECT 1 FROM ONLY %s WHERE ctid = ANY($1::tid[]) FOR UPDATE) l', rel)
        INTO locked USING row_ids;
    RETURN locked;
END
$$;
REVOKE ALL ON FUNCTION buzz.lock_rows_for_deletion(regclass, text[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION buzz.lock_rows_for_deletion(regclass, text[]) TO buzz_deletion_worker;
