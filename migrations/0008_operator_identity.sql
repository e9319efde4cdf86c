-- Operator identity (issue 18): every operator action is signed with an SSH key registered here,
-- and the two-person rule compares key fingerprints.
--
--   * deletion.operators: the registry. Only the owner writes it (`buzz-deletion operators add`,
--     `operators revoke`, connecting with BUZZ_OWNER_DATABASE_URL); the worker reads it. A row is
--     never deleted and never changed except by one revocation.
--   * deletion.operator_signatures: every signed statement that was acted on, with its SSHSIG
--     signature, written by the worker in the transaction that records the action. Append-only.
--     Its primary key (fingerprint, nonce) makes a signature usable once.
--   * requests and approvals name the signature they were made under; an approval row must name
--     a stored approve-signature of a registered, unrevoked key other than the requester's, so a
--     role that may insert approvals still cannot fabricate one that survives an offline check
--     (deploy/local/verify-signatures).

CREATE TABLE deletion.operators (
    -- `SHA256:` + unpadded base64 of the key's SHA-256, as `ssh-keygen -l -E sha256` prints it.
    fingerprint   text PRIMARY KEY CHECK (fingerprint ~ '^SHA256:[A-Za-z0-9+/]{43}$'),
    -- A label for people; unique among keys that are not revoked (see the index below).
    name          text NOT NULL CHECK (name ~ '^[A-Za-z0-9][A-Za-z0-9._@-]{0,63}$'),
    -- The OpenSSH public key line (`ssh-ed25519 AAAA… comment`).
    public_key    text NOT NULL CHECK (length(public_key) > 0),
    -- `ssh-ed25519`, `ecdsa-sha2-nistp256`, `sk-ssh-ed25519@openssh.com`, …
    algorithm     text NOT NULL CHECK (length(algorithm) > 0),
    added_at      timestamptz NOT NULL DEFAULT clock_timestamp(),
    added_by      text NOT NULL DEFAULT session_user,
    revoked_at    timestamptz,
    revoked_by    text,
    revoke_reason text,
    CONSTRAINT revocations_are_complete CHECK ((revoked_at IS NULL) = (revoked_by IS NULL))
);
CREATE UNIQUE INDEX operators_one_live_key_per_name ON deletion.operators (lower(name))
    WHERE revoked_at IS NULL;

-- A registered key is never deleted (its signatures must stay verifiable) and never changed,
-- except once: revoked_at/revoked_by/revoke_reason set on a row that was not revoked.
CREATE FUNCTION deletion.guard_operator_registry() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        RAISE EXCEPTION USING
            ERRCODE = 'BZ002',
            MESSAGE = format('operator key %s is never deleted: revoke it instead '
                             '(buzz-deletion operators revoke)', OLD.fingerprint);
    END IF;
    IF OLD.revoked_at IS NOT NULL
       OR NEW.revoked_at IS NULL
       OR (to_jsonb(NEW) - 'revoked_at' - 'revoked_by' - 'revoke_reason')
          IS DISTINCT FROM (to_jsonb(OLD) - 'revoked_at' - 'revoked_by' - 'revoke_reason') THEN
        RAISE EXCEPTION USING
            ERRCODE = 'BZ002',
            MESSAGE = format('operator key %s can only be revoked, once; %s refused',
                             OLD.fingerprint, TG_OP);
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER operators_revoke_only BEFORE UPDATE OR DELETE ON deletion.operators
    FOR EACH ROW EXECUTE FUNCTION deletion.guard_operator_registry();
CREATE TRIGGER operators_no_truncate BEFORE TRUNCATE ON deletion.operators
    FOR EACH STATEMENT EXECUTE FUNCTION deletion.refuse_mutation();

CREATE TABLE deletion.operator_signatures (
    fingerprint text NOT NULL REFERENCES deletion.operators (fingerprint),
    nonce       text NOT NULL CHECK (nonce ~ '^[0-9a-f]{32}$'),
    action      text NOT NULL CHECK (action IN ('submit', 'approve', 'abort', 'unblock')),
    kind        text NOT NULL CHECK (kind IN ('community', 'user')),
    request_id  uuid NOT NULL,
    -- The frozen inventory digest an approval signed (NULL for other actions).
    digest      text,
    -- The canonical statement, byte for byte what was signed (workflows::operator).
    statement   text NOT NULL,
    -- The armored SSHSIG signature over `statement` under namespace action@buzz-deletion.
    signature   text NOT NULL,
    signed_at   timestamptz NOT NULL,
    recorded_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    -- Who acted on it: workflow id / run id / activity id. A retry of the same activity finds
    -- its own row (idempotent); anyone else presenting the signature is replaying it.
    consumed_by text NOT NULL CHECK (length(consumed_by) > 0),
    PRIMARY KEY (fingerprint, nonce)
);
CREATE INDEX operator_signatures_request_idx ON deletion.operator_signatures (request_id);

-- Only a registered key that is not revoked can have a signature recorded.
CREATE FUNCTION deletion.require_live_operator() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM deletion.operators o
                    WHERE o.fingerprint = NEW.fingerprint AND o.revoked_at IS NULL) THEN
        RAISE EXCEPTION USING
            ERRCODE = 'BZ003',
            MESSAGE = format('key %s is not a registered, unrevoked operator key', NEW.fingerprint);
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER operator_signatures_live_key BEFORE INSERT ON deletion.operator_signatures
    FOR EACH ROW EXECUTE FUNCTION deletion.require_live_operator();
CREATE TRIGGER operator_signatures_append_only BEFORE UPDATE OR DELETE ON deletion.operator_signatures
    FOR EACH ROW EXECUTE FUNCTION deletion.refuse_mutation();
CREATE TRIGGER operator_signatures_no_truncate BEFORE TRUNCATE ON deletion.operator_signatures
    FOR EACH STATEMENT EXECUTE FUNCTION deletion.refuse_mutation();

-- Requests and approvals name the signature they were made under.
ALTER TABLE deletion.requests
    ADD COLUMN requested_fingerprint text,
    ADD COLUMN requested_nonce text,
    ADD CONSTRAINT requests_signed_by FOREIGN KEY (requested_fingerprint, requested_nonce)
        REFERENCES deletion.operator_signatures (fingerprint, nonce);
ALTER TABLE deletion.approvals
    ADD COLUMN approved_fingerprint text,
    ADD COLUMN approved_nonce text,
    ADD CONSTRAINT approvals_signed_by FOREIGN KEY (approved_fingerprint, approved_nonce)
        REFERENCES deletion.operator_signatures (fingerprint, nonce);

-- Once a request names its submit signature, that never changes.
CREATE FUNCTION deletion.keep_request_signature() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog AS $$
BEGIN
    IF OLD.requested_fingerprint IS NOT NULL
       AND (NEW.requested_fingerprint IS DISTINCT FROM OLD.requested_fingerprint
            OR NEW.requested_nonce IS DISTINCT FROM OLD.requested_nonce) THEN
        RAISE EXCEPTION USING
            ERRCODE = 'BZ002',
            MESSAGE = format('request %s: the submit signature it names cannot change', OLD.id);
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER requests_keep_signature BEFORE UPDATE ON deletion.requests
    FOR EACH ROW EXECUTE FUNCTION deletion.keep_request_signature();

-- An approval must name a stored approve-signature for this request and digest, by a registered,
-- unrevoked key that is not the key the request was submitted with.
CREATE FUNCTION deletion.require_signed_approval() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog AS $$
DECLARE
    sig record;
    requester text;
BEGIN
    SELECT s.action, s.request_id, s.digest INTO sig
      FROM deletion.operator_signatures s
     WHERE s.fingerprint = NEW.approved_fingerprint AND s.nonce = NEW.approved_nonce;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'BZ003',
            MESSAGE = format('approval of request %s names no stored operator signature',
                             NEW.request_id);
    END IF;
    IF sig.action <> 'approve' OR sig.request_id <> NEW.request_id
       OR sig.digest IS DISTINCT FROM NEW.inventory_digest THEN
        RAISE EXCEPTION USING ERRCODE = 'BZ003',
            MESSAGE = format('approval of request %s names a signature for %s of request %s '
                             'digest %s', NEW.request_id, sig.action, sig.request_id, sig.digest);
    END IF;
    IF NOT EXISTS (SELECT 1 FROM deletion.operators o
                    WHERE o.fingerprint = NEW.approved_fingerprint AND o.revoked_at IS NULL) THEN
        RAISE EXCEPTION USING ERRCODE = 'BZ003',
            MESSAGE = format('approval of request %s: key %s is not a registered, unrevoked '
                             'operator key', NEW.request_id, NEW.approved_fingerprint);
    END IF;
    SELECT r.requested_fingerprint INTO requester
      FROM deletion.requests r WHERE r.id = NEW.request_id;
    IF requester IS NULL OR requester = NEW.approved_fingerprint THEN
        RAISE EXCEPTION USING ERRCODE = 'BZ003',
            MESSAGE = format('approval of request %s: the approving key must be registered and '
                             'differ from the submitting key (two-person rule)', NEW.request_id);
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER approvals_signed_by_a_second_operator BEFORE INSERT ON deletion.approvals
    FOR EACH ROW EXECUTE FUNCTION deletion.require_signed_approval();

-- Grants. New `deletion` tables get the worker baseline (SELECT, INSERT, UPDATE) by default
-- privilege (0007); narrow it: the registry is read-only to the worker, signatures insert-only.
REVOKE ALL ON deletion.operators, deletion.operator_signatures FROM PUBLIC;
REVOKE ALL ON deletion.operators FROM buzz_deletion_worker, buzz_deletion_serving;
GRANT SELECT ON deletion.operators TO buzz_deletion_worker;
REVOKE ALL ON deletion.operator_signatures FROM buzz_deletion_worker, buzz_deletion_serving;
GRANT SELECT, INSERT ON deletion.operator_signatures TO buzz_deletion_worker;
