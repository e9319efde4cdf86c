-- The purge's row counters only ever grow (issue 29, part 5).
--
-- `deletion.purge_progress` is written by the worker as the purge goes (one upsert per batch,
-- adding the batch's rows), so it cannot be append-only; but no role may lower a count, rename or
-- move a row, or delete one. The receipt does not read these counters: it states the counts the
-- purge's last transaction recorded in the append-only `postgres_purged` checkpoint
-- (`deletion.checkpoints`). Additive: two triggers and their function; nothing existing changes.

CREATE FUNCTION deletion.guard_purge_progress() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog AS $$
BEGIN
    IF TG_OP <> 'UPDATE' THEN
        RAISE EXCEPTION USING
            ERRCODE = 'BZ002',
            MESSAGE = format('deletion.purge_progress counts only grow: %s is refused', TG_OP);
    END IF;
    IF NEW.request_id IS DISTINCT FROM OLD.request_id
       OR NEW.table_name IS DISTINCT FROM OLD.table_name
       OR NEW.rows_deleted < OLD.rows_deleted THEN
        RAISE EXCEPTION USING
            ERRCODE = 'BZ002',
            MESSAGE = format('deletion.purge_progress counts only grow: the count of %s for request '
                             '%s may not go from %s to %s (or move)',
                             OLD.table_name, OLD.request_id, OLD.rows_deleted, NEW.rows_deleted);
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER purge_progress_only_grows BEFORE UPDATE OR DELETE ON deletion.purge_progress
    FOR EACH ROW EXECUTE FUNCTION deletion.guard_purge_progress();
CREATE TRIGGER purge_progress_no_truncate BEFORE TRUNCATE ON deletion.purge_progress
    FOR EACH STATEMENT EXECUTE FUNCTION deletion.guard_purge_progress();
