-- User deletion: the stage history a `UserDeletion` workflow writes, one row per stage reached.
--
-- The request itself is a `deletion.requests` row with kind = 'user' (its lifecycle, execution
-- generation and retry state live there); the approval is its `deletion.approvals` row. This table
-- holds the positions the workflow reached: each row names the stage it was created from
-- (`previous_stage_id`), so progress is reconstructed by following that chain, never by
-- timestamps. Stage names are interpreted by the workflow's policy, not by the database.

-- Drafts of 0001 carried a provisional table of the same name; it never held rows (nothing wrote
-- it before this migration), and this migration owns the table's shape.
DROP TABLE IF EXISTS deletion.user_stage_history;

CREATE TABLE deletion.user_stage_history (
    id                uuid PRIMARY KEY,
    request_id        uuid NOT NULL REFERENCES deletion.requests (id),
    stage             text NOT NULL CHECK (length(stage) > 0),
    -- The community a per-community stage works on; NULL for stages about the user as a whole.
    community_id      uuid,
    status            text NOT NULL CHECK (status IN ('pending', 'running', 'completed', 'failed')),
    -- The request's durable position. "completed and current" is valid: the handler saved its
    -- result and the transition that leaves the row has not been committed yet.
    is_current        boolean NOT NULL,
    -- Handler starts of this row (a retry after a failure or a lost worker starts it again).
    attempt           integer NOT NULL DEFAULT 0 CHECK (attempt >= 0),
    -- The request execution generation of the attempt that last started the handler; writes of
    -- an attempt whose generation is no longer the request's are refused.
    exec_generation   bigint,
    -- Free-form label of the operator's run (`--executor-id`), for the reader.
    executor_id       text,
    created_at        timestamptz NOT NULL DEFAULT clock_timestamp(),
    -- First handler start; kept across retries and worker changes.
    first_started_at  timestamptz,
    -- Start of the latest handler attempt.
    started_at        timestamptz,
    finished_at       timestamptz,
    inputs            jsonb NOT NULL,
    result            jsonb,
    -- The transition decision saved when the row stopped being current.
    transition        jsonb,
    previous_stage_id uuid,
    last_error        text,
    UNIQUE (request_id, id),
    -- The predecessor belongs to the same request.
    FOREIGN KEY (request_id, previous_stage_id)
        REFERENCES deletion.user_stage_history (request_id, id),
    CONSTRAINT started_rows_record_their_start CHECK (
        status = 'pending' OR (attempt >= 1 AND first_started_at IS NOT NULL AND started_at IS NOT NULL)),
    CONSTRAINT completed_rows_carry_a_result CHECK (
        status <> 'completed' OR (result IS NOT NULL AND finished_at IS NOT NULL)),
    CONSTRAINT failed_rows_carry_an_error CHECK (status <> 'failed' OR last_error IS NOT NULL),
    -- A row is left exactly once, by a saved decision, and only after its handler completed.
    CONSTRAINT left_rows_carry_a_decision CHECK (
        is_current OR (transition IS NOT NULL AND status = 'completed')),
    CONSTRAINT decisions_are_saved_when_leaving CHECK (transition IS NULL OR NOT is_current)
);

-- One durable position per request.
CREATE UNIQUE INDEX user_stage_history_one_current
    ON deletion.user_stage_history (request_id) WHERE is_current;
-- Idempotency keys: one initial stage per request and one successor per stage, so a replayed or
-- retried transition can never insert a second row.
CREATE UNIQUE INDEX user_stage_history_one_initial
    ON deletion.user_stage_history (request_id) WHERE previous_stage_id IS NULL;
CREATE UNIQUE INDEX user_stage_history_one_successor
    ON deletion.user_stage_history (previous_stage_id) WHERE previous_stage_id IS NOT NULL;

-- Stage history is evidence: rows are updated while the request runs but never deleted.
CREATE TRIGGER user_stage_history_no_delete BEFORE DELETE ON deletion.user_stage_history
    FOR EACH ROW EXECUTE FUNCTION deletion.refuse_mutation();
CREATE TRIGGER user_stage_history_no_truncate BEFORE TRUNCATE ON deletion.user_stage_history
    FOR EACH STATEMENT EXECUTE FUNCTION deletion.refuse_mutation();
