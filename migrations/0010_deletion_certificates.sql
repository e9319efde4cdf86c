-- Deletion certificates (issue 15): a hash-chained audit trail, signed receipts and one
-- append-only RFC 6962 transparency log across deletions. The encodings are documented in
-- `certificate/src/chain.rs` and docs/certificates.md; the worker computes every hash (canonical
-- JSON is not something SQL can produce), the database checks that each new row extends its
-- request's chain and refuses to change any of it afterwards.

-- ---------------------------------------------------------------------------------------------
-- The audit trail becomes one hash chain per request. `seq` counts the request's events from 1;
-- `prev_hash` is the previous event's `row_hash` (64 zeros for seq 1); `row_hash` is SHA-256 over
-- the RFC 8785 canonical JSON of {request_id, seq, at, actor, event, detail, prev_hash}.
-- Rows written before this migration keep NULLs (they predate the chain; a verifier accepts them
-- only before a request's first chained row). Fleet-wide rows (request_id NULL, e.g. the
-- owner's `schema_changed`) are not chained.
ALTER TABLE deletion.audit_events
    ADD COLUMN seq bigint CHECK (seq >= 1),
    ADD COLUMN prev_hash text CHECK (prev_hash ~ '^[0-9a-f]{64}$'),
    ADD COLUMN row_hash text CHECK (row_hash ~ '^[0-9a-f]{64}$'),
    ADD CONSTRAINT audit_events_chain_columns_together
        CHECK ((seq IS NULL) = (prev_hash IS NULL) AND (seq IS NULL) = (row_hash IS NULL));
CREATE UNIQUE INDEX audit_events_chain_idx ON deletion.audit_events (request_id, seq)
    WHERE seq IS NOT NULL;

-- Every new request-scoped row must be chained and must extend the request's current head: the
-- next seq, linked to the head's hash. Writers hold the request's lock while they read the head,
-- so two writers never race for the same seq (the unique index would refuse the loser anyway).
CREATE FUNCTION deletion.audit_events_extend_chain() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog AS $$
DECLARE
    head_seq bigint;
    head_hash text;
BEGIN
    IF NEW.request_id IS NULL THEN
        IF NEW.seq IS NOT NULL THEN
            RAISE EXCEPTION USING
                ERRCODE = 'BZ005',
                MESSAGE = 'a fleet-wide audit event (no request) is not part of any chain';
        END IF;
        RETURN NEW;
    END IF;
    IF NEW.seq IS NULL THEN
        RAISE EXCEPTION USING
            ERRCODE = 'BZ005',
            MESSAGE = format('audit event %L for request %s is not chained: every request event '
                             'carries seq, prev_hash and row_hash', NEW.event, NEW.request_id);
    END IF;
    SELECT a.seq, a.row_hash INTO head_seq, head_hash
      FROM deletion.audit_events a
     WHERE a.request_id = NEW.request_id AND a.seq IS NOT NULL
     ORDER BY a.seq DESC LIMIT 1;
    IF NEW.seq <> coalesce(head_seq, 0) + 1
       OR NEW.prev_hash <> coalesce(head_hash, repeat('0', 64)) THEN
        RAISE EXCEPTION USING
            ERRCODE = 'BZ005',
            MESSAGE = format('audit event %L for request %s does not extend its chain: seq %s '
                             'after head %s', NEW.event, NEW.request_id, NEW.seq,
                             coalesce(head_seq, 0));
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER audit_events_extend_chain BEFORE INSERT ON deletion.audit_events
    FOR EACH ROW EXECUTE FUNCTION deletion.audit_events_extend_chain();

-- ---------------------------------------------------------------------------------------------
-- Signed receipts: one per finished request, written in the transaction that finishes it.
-- `signed` is the signed receipt (receipt, per-field digests, Ed25519 signature) exactly as the
-- certificate exports it; `receipt_digest` is its log leaf.
CREATE TABLE deletion.receipts (
    request_id     uuid PRIMARY KEY REFERENCES deletion.requests (id),
    kind           text NOT NULL CHECK (kind IN ('community', 'user')),
    key_id         text NOT NULL,
    signed         jsonb NOT NULL,
    receipt_digest text NOT NULL UNIQUE CHECK (receipt_digest ~ '^[0-9a-f]{64}$'),
    created_at     timestamptz NOT NULL DEFAULT clock_timestamp()
);

-- The transparency log: leaf i is the digest of the i-th receipt ever signed.
CREATE TABLE deletion.transparency_log (
    leaf_index     bigint PRIMARY KEY CHECK (leaf_index >= 0),
    receipt_digest text NOT NULL UNIQUE REFERENCES deletion.receipts (receipt_digest),
    request_id     uuid NOT NULL UNIQUE REFERENCES deletion.receipts (request_id),
    appended_at    timestamptz NOT NULL DEFAULT clock_timestamp()
);

-- A signed checkpoint (tree size, root hash, signature) after every append.
CREATE TABLE deletion.log_checkpoints (
    tree_size  bigint PRIMARY KEY CHECK (tree_size >= 1),
    root_hash  text NOT NULL CHECK (root_hash ~ '^[0-9a-f]{64}$'),
    checkpoint jsonb NOT NULL,
    created_at timestamptz NOT NULL DEFAULT clock_timestamp()
);

-- Copies of receipts written to the object-lock (compliance retention) bucket.
CREATE TABLE deletion.receipt_archives (
    request_id   uuid PRIMARY KEY REFERENCES deletion.receipts (request_id),
    bucket       text NOT NULL,
    object_key   text NOT NULL,
    version_id   text,
    retain_until timestamptz,
    archived_at  timestamptz NOT NULL DEFAULT clock_timestamp()
);

-- None of it can be changed or removed, by any role, while these triggers stand (and dropping
-- one is owner DDL, which deploy/postgres/owner_ddl_audit.sql records).
CREATE TRIGGER receipts_append_only BEFORE UPDATE OR DELETE ON deletion.receipts
    FOR EACH ROW EXECUTE FUNCTION deletion.refuse_mutation();
CREATE TRIGGER receipts_no_truncate BEFORE TRUNCATE ON deletion.receipts
    FOR EACH STATEMENT EXECUTE FUNCTION deletion.refuse_mutation();
CREATE TRIGGER transparency_log_append_only BEFORE UPDATE OR DELETE ON deletion.transparency_log
    FOR EACH ROW EXECUTE FUNCTION deletion.refuse_mutation();
CREATE TRIGGER transparency_log_no_truncate BEFORE TRUNCATE ON deletion.transparency_log
    FOR EACH STATEMENT EXECUTE FUNCTION deletion.refuse_mutation();
CREATE TRIGGER log_checkpoints_append_only BEFORE UPDATE OR DELETE ON deletion.log_checkpoints
    FOR EACH ROW EXECUTE FUNCTION deletion.refuse_mutation();
CREATE TRIGGER log_checkpoints_no_truncate BEFORE TRUNCATE ON deletion.log_checkpoints
    FOR EACH STATEMENT EXECUTE FUNCTION deletion.refuse_mutation();
CREATE TRIGGER receipt_archives_append_only BEFORE UPDATE OR DELETE ON deletion.receipt_archives
    FOR EACH ROW EXECUTE FUNCTION deletion.refuse_mutation();
CREATE TRIGGER receipt_archives_no_truncate BEFORE TRUNCATE ON deletion.receipt_archives
    FOR EACH STATEMENT EXECUTE FUNCTION deletion.refuse_mutation();

-- The worker writes each row once (default privileges gave it SELECT, INSERT, UPDATE).
REVOKE UPDATE ON deletion.receipts, deletion.transparency_log, deletion.log_checkpoints,
                 deletion.receipt_archives FROM buzz_deletion_worker;
