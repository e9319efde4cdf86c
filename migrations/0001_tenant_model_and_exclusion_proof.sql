-- Tenant model (schema `buzz`, what the relay serves) and deletion bookkeeping (schema `deletion`,
-- the exclusion proof). Bookkeeping lives apart so it is never mistaken for tenant data: tenant
-- tables are discovered from the catalog as "every `buzz` table with a `community_id` column".

CREATE SCHEMA IF NOT EXISTS buzz;
CREATE SCHEMA IF NOT EXISTS deletion;

-- ---------------------------------------------------------------------------------------------
-- Deletion fence state. Defined first because the tenant write-fence trigger reads it.
-- A row is created with the community (trigger below) and outlives it as evidence; a community
-- without a row (created before this schema) is treated as serving until it is first quiesced.
CREATE TABLE deletion.community_fences (
    community_id uuid PRIMARY KEY,
    state        text   NOT NULL CHECK (state IN ('serving', 'quiescing', 'fenced')),
    -- Bumped on every quiesce, fence and unfence: a lease or token minted under an older
    -- generation can never be mistaken for a current one.
    generation   bigint NOT NULL DEFAULT 0 CHECK (generation >= 0),
    request_id   uuid,
    updated_at   timestamptz NOT NULL DEFAULT now()
);

-- Refuses INSERT/UPDATE of a row that belongs (or belonged) to a fenced community.
-- SQLSTATE BZ001 lets the serving side recognise the refusal without reading the message.
--
-- The fence row is read FOR SHARE: a writing transaction holds that lock until it commits, and
-- `fence` must take the row FOR UPDATE, so the fence cannot commit while a row write that passed
-- this check is still uncommitted. After the fence commits, every new write sees `fenced`.
-- SECURITY DEFINER so the serving role needs no privilege on the deletion schema.
CREATE FUNCTION buzz.refuse_fenced_write() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog AS $$
DECLARE
    fence_state text;
BEGIN
    SELECT f.state INTO fence_state FROM deletion.community_fences f
     WHERE f.community_id = NEW.community_id FOR SHARE;
    IF fence_state = 'fenced' THEN
        RAISE EXCEPTION USING
            ERRCODE = 'BZ001',
            MESSAGE = format('community %s is fenced for deletion: writes to %s are refused',
                             NEW.community_id, TG_TABLE_NAME);
    END IF;
    IF TG_OP = 'UPDATE' AND OLD.community_id IS DISTINCT FROM NEW.community_id THEN
        SELECT f.state INTO fence_state FROM deletion.community_fences f
         WHERE f.community_id = OLD.community_id FOR SHARE;
        IF fence_state = 'fenced' THEN
            RAISE EXCEPTION USING
                ERRCODE = 'BZ001',
                MESSAGE = format('community %s is fenced for deletion: rows of %s cannot move',
                                 OLD.community_id, TG_TABLE_NAME);
        END IF;
    END IF;
    RETURN NEW;
END
$$;

-- The community row itself is keyed by `id`, not `community_id`: same rule, its own function.
CREATE FUNCTION buzz.refuse_fenced_community_update() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog AS $$
DECLARE
    fence_state text;
BEGIN
    SELECT f.state INTO fence_state FROM deletion.community_fences f
     WHERE f.community_id = OLD.id FOR SHARE;
    IF fence_state = 'fenced' THEN
        RAISE EXCEPTION USING
            ERRCODE = 'BZ001',
            MESSAGE = format('community %s is fenced for deletion: its row is read-only', OLD.id);
    END IF;
    RETURN NEW;
END
$$;

-- Every community is born with a `serving` fence row, so there is always a row for writers to
-- lock FOR SHARE and for `fence` to lock FOR UPDATE: no write can slip between the two.
CREATE FUNCTION buzz.create_serving_fence_row() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog AS $$
BEGIN
    INSERT INTO deletion.community_fences (community_id, state, generation)
    VALUES (NEW.id, 'serving', 0)
    ON CONFLICT (community_id) DO NOTHING;
    RETURN NEW;
END
$$;

-- ---------------------------------------------------------------------------------------------
-- Tenant model.
CREATE TABLE buzz.communities (
    id           uuid PRIMARY KEY,
    host         text NOT NULL UNIQUE CHECK (host = lower(host) AND length(host) BETWEEN 1 AND 253),
    display_name text NOT NULL DEFAULT '',
    created_at   timestamptz NOT NULL DEFAULT now()
);

CREATE TRIGGER communities_fence_row AFTER INSERT ON buzz.communities
    FOR EACH ROW EXECUTE FUNCTION buzz.create_serving_fence_row();
CREATE TRIGGER communities_write_fence BEFORE UPDATE ON buzz.communities
    FOR EACH ROW EXECUTE FUNCTION buzz.refuse_fenced_community_update();

CREATE TABLE buzz.channels (
    id           uuid PRIMARY KEY,
    community_id uuid NOT NULL REFERENCES buzz.communities (id),
    name         text NOT NULL,
    topic        text NOT NULL DEFAULT '',
    created_at   timestamptz NOT NULL DEFAULT now(),
    UNIQUE (community_id, name)
);

CREATE TABLE buzz.events (
    id           text PRIMARY KEY,             -- 64-hex event id
    community_id uuid NOT NULL REFERENCES buzz.communities (id),
    channel_id   uuid,
    pubkey       text NOT NULL,
    kind         integer NOT NULL,
    content      text NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX events_community_idx ON buzz.events (community_id);

CREATE TABLE buzz.memberships (
    community_id uuid NOT NULL REFERENCES buzz.communities (id),
    pubkey       text NOT NULL,
    role         text NOT NULL DEFAULT 'member',
    joined_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (community_id, pubkey)
);

CREATE TABLE buzz.pubkey_allowlist (
    community_id uuid NOT NULL REFERENCES buzz.communities (id),
    pubkey       text NOT NULL,
    added_by     text NOT NULL DEFAULT '',
    PRIMARY KEY (community_id, pubkey)
);

CREATE TABLE buzz.agents (
    id           uuid PRIMARY KEY,
    community_id uuid NOT NULL REFERENCES buzz.communities (id),
    pubkey       text NOT NULL,
    name         text NOT NULL,
    config       jsonb NOT NULL DEFAULT '{}'::jsonb
);
CREATE INDEX agents_community_idx ON buzz.agents (community_id);

CREATE TABLE buzz.media_uploads (
    id           uuid PRIMARY KEY,
    community_id uuid NOT NULL REFERENCES buzz.communities (id),
    sha256       text NOT NULL,
    object_key   text NOT NULL,
    bytes        bigint NOT NULL,
    uploaded_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX media_uploads_community_idx ON buzz.media_uploads (community_id);

DO $$
DECLARE t text;
BEGIN
    FOREACH t IN ARRAY ARRAY['channels', 'events', 'memberships', 'pubkey_allowlist', 'agents', 'media_uploads'] LOOP
        EXECUTE format('CREATE TRIGGER buzz_write_fence BEFORE INSERT OR UPDATE ON buzz.%I
                        FOR EACH ROW EXECUTE FUNCTION buzz.refuse_fenced_write()', t);
    END LOOP;
END
$$;

-- ---------------------------------------------------------------------------------------------
-- Deletion bookkeeping.
CREATE TABLE deletion.requests (
    id               uuid PRIMARY KEY,
    kind             text NOT NULL CHECK (kind IN ('community', 'user')),
    community_id     uuid,
    host             text,
    target           text,
    workflow_id      text NOT NULL UNIQUE,
    requested_by     text NOT NULL CHECK (length(trim(requested_by)) > 0),
    reason           text,
    stage            text NOT NULL,
    inventory        jsonb,
    inventory_digest text,
    destructive_manifest jsonb,
    -- sha256 over the canonical encoding of `destructive_manifest`, re-checked on every read.
    destructive_manifest_digest text,
    -- Bumped by every activity attempt that claims the request: writes carry the generation they
    -- claimed, so a timed-out (zombie) attempt can never stamp progress after its successor began.
    exec_generation  bigint NOT NULL DEFAULT 0,
    -- Fence generation recorded when the community was fenced for this request.
    fence_generation bigint,
    -- Set, under the request row lock, just before the first irreversible delete. Abort is refused
    -- once it is set.
    irreversible_at  timestamptz,
    blocked_stage    text,
    blocked_reason   text,
    blocked_at       timestamptz,
    last_error       text,
    retry_count      integer NOT NULL DEFAULT 0,
    next_attempt_at  timestamptz,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    completed_at     timestamptz,
    CONSTRAINT community_requests_name_their_community CHECK (
        kind <> 'community' OR (community_id IS NOT NULL AND host IS NOT NULL)),
    CONSTRAINT user_requests_name_their_target CHECK (kind <> 'user' OR target IS NOT NULL),
    CONSTRAINT stage_belongs_to_kind CHECK (
        (kind = 'community' AND stage IN ('submitted', 'inventoried', 'approved', 'fenced', 'drained',
                                          'bindings_removed', 'postgres_purged', 'cache_purged',
                                          'logically_verified', 'retention_pending', 'aborted'))
        OR (kind = 'user' AND stage IN ('inventoried', 'approved', 'running', 'retry_wait',
                                        'completed', 'aborted')))
);
-- At most one open request per community, enforced by the database itself.
CREATE UNIQUE INDEX requests_one_open_per_community ON deletion.requests (community_id)
    WHERE kind = 'community' AND stage NOT IN ('retention_pending', 'aborted');
CREATE INDEX requests_created_idx ON deletion.requests (created_at DESC);

-- Approval evidence: one per request, bound to the frozen inventory digest, never updated.
CREATE TABLE deletion.approvals (
    id               bigserial PRIMARY KEY,
    request_id       uuid NOT NULL UNIQUE REFERENCES deletion.requests (id),
    approved_by      text NOT NULL CHECK (length(trim(approved_by)) > 0),
    approved_at      timestamptz NOT NULL DEFAULT now(),
    inventory_digest text NOT NULL,
    note             text
);

-- Durable stage milestones with their evidence (counts, digests).
CREATE TABLE deletion.checkpoints (
    request_id      uuid NOT NULL REFERENCES deletion.requests (id),
    stage           text NOT NULL,
    reached_at      timestamptz NOT NULL DEFAULT now(),
    exec_generation bigint NOT NULL,
    detail          jsonb NOT NULL DEFAULT '{}'::jsonb,
    PRIMARY KEY (request_id, stage)
);

-- Serving-write leases: the durable proof that no external serving write is in flight.
CREATE TABLE deletion.serving_write_leases (
    id               uuid PRIMARY KEY,
    community_id     uuid NOT NULL,
    operation        text NOT NULL,
    owner            text NOT NULL,
    fence_generation bigint NOT NULL,
    acquired_at      timestamptz NOT NULL DEFAULT now(),
    renewed_at       timestamptz NOT NULL DEFAULT now(),
    expires_at       timestamptz NOT NULL,
    released_at      timestamptz
);
CREATE INDEX serving_write_leases_live_idx ON deletion.serving_write_leases (community_id)
    WHERE released_at IS NULL;

-- The destructive manifest, streamed in chunks of at most 10,000 versions (never spanning prefixes).
CREATE TABLE deletion.manifest_chunks (
    request_id        uuid NOT NULL REFERENCES deletion.requests (id),
    chunk_no          integer NOT NULL CHECK (chunk_no >= 0),
    prefix            text NOT NULL,
    entries           jsonb NOT NULL,          -- array of encoded manifest entries
    entry_count       integer NOT NULL CHECK (entry_count BETWEEN 1 AND 10000),
    exec_generation   bigint NOT NULL,         -- generation of the freeze that wrote it
    deleted_at        timestamptz,             -- the stamp: every entry acknowledged
    deleted_versions  bigint,
    stamp_generation  bigint,
    PRIMARY KEY (request_id, chunk_no)
);
CREATE INDEX manifest_chunks_pending_idx ON deletion.manifest_chunks (request_id, chunk_no)
    WHERE deleted_at IS NULL;

-- Append-only audit trail; outlives Temporal's history retention.
CREATE TABLE deletion.audit_events (
    id         bigserial PRIMARY KEY,
    request_id uuid,
    at         timestamptz NOT NULL DEFAULT clock_timestamp(),
    actor      text NOT NULL,
    event      text NOT NULL,
    detail     jsonb NOT NULL DEFAULT '{}'::jsonb
);
CREATE INDEX audit_events_request_idx ON deletion.audit_events (request_id, id);

CREATE FUNCTION deletion.refuse_mutation() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION USING
        ERRCODE = 'BZ002',
        MESSAGE = format('%s.%s is append-only: %s is refused', TG_TABLE_SCHEMA, TG_TABLE_NAME, TG_OP);
END
$$;
CREATE TRIGGER audit_events_append_only BEFORE UPDATE OR DELETE ON deletion.audit_events
    FOR EACH ROW EXECUTE FUNCTION deletion.refuse_mutation();
CREATE TRIGGER audit_events_no_truncate BEFORE TRUNCATE ON deletion.audit_events
    FOR EACH STATEMENT EXECUTE FUNCTION deletion.refuse_mutation();
CREATE TRIGGER approvals_append_only BEFORE UPDATE OR DELETE ON deletion.approvals
    FOR EACH ROW EXECUTE FUNCTION deletion.refuse_mutation();
CREATE TRIGGER approvals_no_truncate BEFORE TRUNCATE ON deletion.approvals
    FOR EACH STATEMENT EXECUTE FUNCTION deletion.refuse_mutation();
CREATE TRIGGER checkpoints_append_only BEFORE UPDATE OR DELETE ON deletion.checkpoints
    FOR EACH ROW EXECUTE FUNCTION deletion.refuse_mutation();

-- Observational bucket-wide key-taxonomy sweeps (never gate a deletion).
CREATE TABLE deletion.taxonomy_sweeps (
    id                   uuid PRIMARY KEY,
    started_at           timestamptz NOT NULL,
    finished_at          timestamptz NOT NULL DEFAULT now(),
    object_cap           bigint NOT NULL,
    listed_objects       bigint NOT NULL,
    unknown_object_count bigint NOT NULL,
    unknown_key_sample   jsonb NOT NULL DEFAULT '[]'::jsonb,
    reached_cap          boolean NOT NULL
);

-- Rows deleted per tenant table by `purge_postgres`, committed with each batch so a report after
-- a retried attempt still counts the rows earlier attempts removed.
CREATE TABLE deletion.purge_progress (
    request_id   uuid   NOT NULL REFERENCES deletion.requests (id),
    table_name   text   NOT NULL,
    rows_deleted bigint NOT NULL DEFAULT 0 CHECK (rows_deleted >= 0),
    updated_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (request_id, table_name)
);
