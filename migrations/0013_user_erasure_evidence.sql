-- Evidence of a real user deletion (issue 17): what each purge batch removed, and the decision
-- taken for every media object the user uploaded.
--
-- `deletion.user_purge_log`: one row per irreversible batch, written in the same transaction as
-- a row batch's DELETE (so the log and the rows cannot disagree: a batch is either deleted and
-- logged, or neither), and right after an object or key batch was acknowledged. Append-only.
CREATE TABLE deletion.user_purge_log (
    id              bigserial PRIMARY KEY,
    request_id      uuid NOT NULL REFERENCES deletion.requests (id),
    stage_id        uuid NOT NULL REFERENCES deletion.user_stage_history (id),
    community_id    uuid NOT NULL,
    -- rows: a tenant relation's rows; object_versions: versions of one media object;
    -- user_keys / agent_keys: Redis keys of a per-user or per-agent namespace.
    what            text NOT NULL CHECK (what IN ('rows', 'object_versions', 'user_keys', 'agent_keys')),
    -- The relation (schema.name), the object key, or the key pattern.
    subject         text NOT NULL,
    removed         bigint NOT NULL CHECK (removed >= 0),
    exec_generation bigint NOT NULL,
    at              timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX user_purge_log_request_idx ON deletion.user_purge_log (request_id, community_id);
CREATE TRIGGER user_purge_log_append_only BEFORE UPDATE OR DELETE ON deletion.user_purge_log
    FOR EACH ROW EXECUTE FUNCTION deletion.refuse_mutation();
CREATE TRIGGER user_purge_log_no_truncate BEFORE TRUNCATE ON deletion.user_purge_log
    FOR EACH STATEMENT EXECUTE FUNCTION deletion.refuse_mutation();

-- `deletion.user_media_decisions`: per request, community and object key the user uploaded, the
-- decision and what it rested on. Content-addressed media are shared: an object is deleted only
-- when no remaining upload in that community (by anyone else, or by nobody on record) references
-- it. A `delete` decision lists the exact versions it covers, listed BEFORE the references were
-- counted: a version put after the listing (a later upload by someone else) is never in it. The
-- row is written once; only `deleted_at`/`deleted_versions` may be set afterwards, once.
CREATE TABLE deletion.user_media_decisions (
    request_id        uuid NOT NULL REFERENCES deletion.requests (id),
    community_id      uuid NOT NULL,
    object_key        text NOT NULL,
    decision          text NOT NULL CHECK (decision IN ('delete', 'keep_shared')),
    -- Uploads in the community referencing the object that are not the user's.
    other_references  bigint NOT NULL CHECK (other_references >= 0),
    -- The user's own upload rows referencing it when decided.
    user_references   bigint NOT NULL CHECK (user_references >= 0),
    -- [{"key": …, "version_id": …}] covered by a delete decision; [] for keep_shared.
    versions          jsonb NOT NULL,
    exec_generation   bigint NOT NULL,
    decided_at        timestamptz NOT NULL DEFAULT clock_timestamp(),
    deleted_at        timestamptz,
    deleted_versions  bigint,
    PRIMARY KEY (request_id, community_id, object_key),
    CHECK (decision = 'delete' OR (deleted_at IS NULL AND versions = '[]'::jsonb)),
    CHECK ((deleted_at IS NULL) = (deleted_versions IS NULL))
);

CREATE FUNCTION deletion.guard_user_media_decision() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog AS $$
BEGIN
    IF TG_OP = 'DELETE' OR OLD.deleted_at IS NOT NULL
       OR (to_jsonb(NEW) - 'deleted_at' - 'deleted_versions')
          IS DISTINCT FROM (to_jsonb(OLD) - 'deleted_at' - 'deleted_versions') THEN
        RAISE EXCEPTION USING
            ERRCODE = 'BZ002',
            MESSAGE = format('deletion.user_media_decisions row (%s, %s, %s) is final: %s is refused',
                             OLD.request_id, OLD.community_id, OLD.object_key, TG_OP);
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER user_media_decisions_final BEFORE UPDATE OR DELETE ON deletion.user_media_decisions
    FOR EACH ROW EXECUTE FUNCTION deletion.guard_user_media_decision();
CREATE TRIGGER user_media_decisions_no_truncate BEFORE TRUNCATE ON deletion.user_media_decisions
    FOR EACH STATEMENT EXECUTE FUNCTION deletion.refuse_mutation();

-- The worker reads and appends (default privileges of 0007 grant SELECT, INSERT, UPDATE); the log
-- is never updated.
REVOKE UPDATE ON deletion.user_purge_log FROM buzz_deletion_worker;
