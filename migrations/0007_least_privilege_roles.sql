-- Least-privilege roles and evidence that cannot be rewritten (issue 12, items 3 and 4).
--
-- Three kinds of database login, one job each:
--   * the OWNER (the role that runs `buzz-deletion migrate`, i.e. this migration) owns both
--     schemas and every object in them; nothing else connects as it;
--   * the WORKER (`buzz-deletion-worker` and the CLI's ordinary commands) is a member of the
--     NOLOGIN group role `buzz_deletion_worker`;
--   * the SERVING side (the relay, `demo seed`, `demo serve`) is a member of the NOLOGIN group
--     role `buzz_deletion_serving`.
-- Privileges are granted to the two group roles, never to login roles: migrations are embedded
-- and checksummed, so they cannot name per-deployment login roles, and a login role can be
-- rotated (new role, GRANT membership, drop the old one) without touching a single table grant.
--
-- Neither group owns anything, so neither can ALTER/DROP a table or trigger, and neither is
-- granted TRUNCATE. The evidence tables additionally refuse UPDATE/DELETE/TRUNCATE by trigger,
-- which binds every role; only the owner can take such a trigger away, and the owner's DDL is
-- made visible outside this migration (event trigger + log_statement, see docs/production.md).

-- ---------------------------------------------------------------------------------------------
-- Group roles: created here when the migrating role may create roles (superuser/CREATEROLE),
-- otherwise they must exist already (deploy/local/up and the production runbook create them).
DO $$
DECLARE
    group_role text;
BEGIN
    FOREACH group_role IN ARRAY ARRAY['buzz_deletion_worker', 'buzz_deletion_serving'] LOOP
        IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = group_role) THEN
            IF EXISTS (SELECT 1 FROM pg_catalog.pg_roles
                        WHERE rolname = current_user AND (rolsuper OR rolcreaterole)) THEN
                EXECUTE format('CREATE ROLE %I NOLOGIN', group_role);
            ELSE
                RAISE EXCEPTION USING
                    ERRCODE = '42704',
                    MESSAGE = format('group role %s does not exist and %s may not create it',
                                     group_role, current_user),
                    HINT = format('as a superuser: CREATE ROLE %I NOLOGIN; then GRANT %I TO the '
                                  'login role; see docs/production.md', group_role, group_role);
            END IF;
        END IF;
    END LOOP;
END
$$;

-- ---------------------------------------------------------------------------------------------
-- Tenant schema `buzz`: the worker reads the catalog and rows and deletes rows; the serving side
-- reads and writes rows. Default privileges extend the same grants to tenant tables added later
-- by the owner, so a new tenant table is purged (and fenced) without a grant of its own.
REVOKE ALL ON SCHEMA buzz FROM PUBLIC;
GRANT USAGE ON SCHEMA buzz TO buzz_deletion_worker, buzz_deletion_serving;
GRANT SELECT, DELETE ON ALL TABLES IN SCHEMA buzz TO buzz_deletion_worker;
GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA buzz TO buzz_deletion_serving;
GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA buzz TO buzz_deletion_serving;
ALTER DEFAULT PRIVILEGES IN SCHEMA buzz
    GRANT SELECT, DELETE ON TABLES TO buzz_deletion_worker;
ALTER DEFAULT PRIVILEGES IN SCHEMA buzz
    GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO buzz_deletion_serving;
ALTER DEFAULT PRIVILEGES IN SCHEMA buzz
    GRANT USAGE, SELECT ON SEQUENCES TO buzz_deletion_serving;

-- ---------------------------------------------------------------------------------------------
-- Bookkeeping schema `deletion`: the worker gets what the store does, table by table. The
-- serving side gets USAGE only, to call the SECURITY DEFINER lease functions below; it can read
-- or write no `deletion` table directly.
REVOKE ALL ON SCHEMA deletion FROM PUBLIC;
GRANT USAGE ON SCHEMA deletion TO buzz_deletion_worker, buzz_deletion_serving;
REVOKE ALL ON ALL TABLES IN SCHEMA deletion FROM PUBLIC;

-- Baseline for every bookkeeping table (including ones earlier migrations added): read, insert,
-- update; never DELETE or TRUNCATE. Narrowed per table below; a later bookkeeping table gets the
-- same baseline by default and must grant DELETE itself if the store ever needs it.
GRANT SELECT, INSERT, UPDATE ON ALL TABLES IN SCHEMA deletion TO buzz_deletion_worker;
GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA deletion TO buzz_deletion_worker;
ALTER DEFAULT PRIVILEGES IN SCHEMA deletion
    GRANT SELECT, INSERT, UPDATE ON TABLES TO buzz_deletion_worker;
ALTER DEFAULT PRIVILEGES IN SCHEMA deletion
    GRANT USAGE, SELECT ON SEQUENCES TO buzz_deletion_worker;

-- Evidence is written once: no UPDATE, whatever the triggers say.
REVOKE UPDATE ON deletion.approvals, deletion.audit_events, deletion.checkpoints,
                 deletion.taxonomy_sweeps FROM buzz_deletion_worker;
-- Leases are the serving side's: the worker only counts live ones before fencing.
REVOKE INSERT, UPDATE ON deletion.serving_write_leases FROM buzz_deletion_worker;
-- Unbound (unstamped) chunks are cleared when a manifest is frozen again; stamped chunks are
-- protected by the trigger below.
GRANT DELETE ON deletion.manifest_chunks TO buzz_deletion_worker;

-- `buzz-deletion-worker` refuses to start on an outdated schema: it reads the migration record.
GRANT SELECT ON public._sqlx_migrations TO buzz_deletion_worker, buzz_deletion_serving;

-- ---------------------------------------------------------------------------------------------
-- Evidence that cannot be rewritten (binds every role, the owner included; only the owner could
-- drop or disable these triggers, and that DDL is recorded, see docs/production.md).

-- Checkpoints already refuse UPDATE/DELETE (0001); TRUNCATE too now.
CREATE TRIGGER checkpoints_no_truncate BEFORE TRUNCATE ON deletion.checkpoints
    FOR EACH STATEMENT EXECUTE FUNCTION deletion.refuse_mutation();

-- A stamped manifest chunk (deleted_at set) is the record that its versions were destroyed: it
-- can be neither changed nor deleted. Unstamped chunks can still be rewritten and stamped.
CREATE TRIGGER manifest_chunks_stamped_are_final BEFORE UPDATE OR DELETE ON deletion.manifest_chunks
    FOR EACH ROW WHEN (OLD.deleted_at IS NOT NULL) EXECUTE FUNCTION deletion.refuse_mutation();
CREATE TRIGGER manifest_chunks_no_truncate BEFORE TRUNCATE ON deletion.manifest_chunks
    FOR EACH STATEMENT EXECUTE FUNCTION deletion.refuse_mutation();

-- User stage history: a row that is no longer current is final. A completed row that is still
-- current may only be left: `is_current` true -> false with its transition decision saved, every
-- other column unchanged.
CREATE FUNCTION deletion.guard_user_stage_history() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog AS $$
BEGIN
    IF NOT OLD.is_current THEN
        RAISE EXCEPTION USING
            ERRCODE = 'BZ002',
            MESSAGE = format('deletion.user_stage_history row %s is no longer current: %s is refused',
                             OLD.id, TG_OP);
    END IF;
    IF OLD.status = 'completed'
       AND (NEW.is_current
            OR OLD.transition IS NOT NULL
            OR (to_jsonb(NEW) - 'is_current' - 'transition')
               IS DISTINCT FROM (to_jsonb(OLD) - 'is_current' - 'transition')) THEN
        RAISE EXCEPTION USING
            ERRCODE = 'BZ002',
            MESSAGE = format('deletion.user_stage_history row %s is completed: it can only be left '
                             'with its transition decision, not changed', OLD.id);
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER user_stage_history_final_rows BEFORE UPDATE ON deletion.user_stage_history
    FOR EACH ROW EXECUTE FUNCTION deletion.guard_user_stage_history();

-- ---------------------------------------------------------------------------------------------
-- Serving-write leases through SECURITY DEFINER functions: the serving side's only door into
-- `deletion`. Each checks what the lease library checked before, inside one statement, with the
-- fence row held FOR SHARE (so a concurrent `fence` either sees the lease or refuses it).
-- Outcomes are returned as text for the library to map to its typed errors.

-- Admits one serving write: outcome 'acquired' (with the lease), 'quiescing', 'fenced' or
-- 'unknown_community'.
CREATE FUNCTION deletion.acquire_serving_write_lease(
    p_community_id uuid, p_operation text, p_owner text, p_ttl_secs double precision,
    OUT outcome text, OUT lease_id uuid, OUT fence_generation bigint, OUT expires_at timestamptz)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog AS $$
DECLARE
    fence_state text;
BEGIN
    IF coalesce(length(trim(p_operation)), 0) = 0 OR coalesce(length(trim(p_owner)), 0) = 0 THEN
        RAISE EXCEPTION USING ERRCODE = '22023', MESSAGE = 'a lease needs an operation and an owner';
    END IF;
    IF p_ttl_secs IS NULL OR NOT p_ttl_secs > 0 OR p_ttl_secs > 86400 THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('lease ttl %s s is outside (0, 86400]', p_ttl_secs);
    END IF;
    SELECT f.state, f.generation INTO fence_state, fence_generation
      FROM deletion.community_fences f WHERE f.community_id = p_community_id FOR SHARE;
    IF NOT FOUND THEN
        IF NOT EXISTS (SELECT 1 FROM buzz.communities c WHERE c.id = p_community_id) THEN
            outcome := 'unknown_community';
            RETURN;
        END IF;
        INSERT INTO deletion.community_fences (community_id, state, generation)
        VALUES (p_community_id, 'serving', 0) ON CONFLICT (community_id) DO NOTHING;
        SELECT f.state, f.generation INTO fence_state, fence_generation
          FROM deletion.community_fences f WHERE f.community_id = p_community_id FOR SHARE;
    END IF;
    IF fence_state <> 'serving' THEN
        outcome := fence_state;
        RETURN;
    END IF;
    lease_id := gen_random_uuid();
    INSERT INTO deletion.serving_write_leases
        (id, community_id, operation, owner, fence_generation, expires_at)
    VALUES (lease_id, p_community_id, p_operation, p_owner, fence_generation,
            clock_timestamp() + make_interval(secs => p_ttl_secs))
    RETURNING serving_write_leases.expires_at INTO expires_at;
    outcome := 'acquired';
END
$$;

-- Checks (and with p_renew_secs, extends) a lease: outcome 'valid', 'fenced', 'missing',
-- 'not_owner', 'released' or 'expired'; expires_at is the (new) expiry when valid.
CREATE FUNCTION deletion.check_serving_write_lease(
    p_lease_id uuid, p_community_id uuid, p_owner text, p_renew_secs double precision,
    OUT outcome text, OUT expires_at timestamptz)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog AS $$
DECLARE
    fence_state text;
    lease record;
BEGIN
    IF p_renew_secs IS NOT NULL AND (NOT p_renew_secs > 0 OR p_renew_secs > 86400) THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('lease ttl %s s is outside (0, 86400]', p_renew_secs);
    END IF;
    SELECT f.state INTO fence_state
      FROM deletion.community_fences f WHERE f.community_id = p_community_id FOR SHARE;
    IF fence_state = 'fenced' THEN
        outcome := 'fenced';
        RETURN;
    END IF;
    IF p_renew_secs IS NULL THEN
        SELECT l.owner, l.released_at IS NOT NULL AS released,
               l.expires_at <= clock_timestamp() AS expired, l.expires_at
          INTO lease FROM deletion.serving_write_leases l
         WHERE l.id = p_lease_id AND l.community_id = p_community_id;
    ELSE
        SELECT l.owner, l.released_at IS NOT NULL AS released,
               l.expires_at <= clock_timestamp() AS expired, l.expires_at
          INTO lease FROM deletion.serving_write_leases l
         WHERE l.id = p_lease_id AND l.community_id = p_community_id FOR UPDATE;
    END IF;
    IF NOT FOUND THEN
        outcome := 'missing';
    ELSIF lease.owner IS DISTINCT FROM p_owner THEN
        outcome := 'not_owner';
    ELSIF lease.released THEN
        outcome := 'released';
    ELSIF lease.expired THEN
        outcome := 'expired';
    ELSIF p_renew_secs IS NULL THEN
        outcome := 'valid';
        expires_at := lease.expires_at;
    ELSE
        UPDATE deletion.serving_write_leases l
           SET expires_at = clock_timestamp() + make_interval(secs => p_renew_secs),
               renewed_at = clock_timestamp()
         WHERE l.id = p_lease_id
        RETURNING l.expires_at INTO expires_at;
        outcome := 'valid';
    END IF;
END
$$;

-- Releases the caller's lease: true if it was still live, false if already released, expired
-- (then marked released anyway) or not this owner's (then unchanged).
CREATE FUNCTION deletion.release_serving_write_lease(
    p_lease_id uuid, p_community_id uuid, p_owner text) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog AS $$
DECLARE
    was_live boolean;
BEGIN
    UPDATE deletion.serving_write_leases l SET released_at = clock_timestamp()
     WHERE l.id = p_lease_id AND l.owner = p_owner AND l.community_id = p_community_id
       AND l.released_at IS NULL
    RETURNING l.expires_at > clock_timestamp() INTO was_live;
    RETURN coalesce(was_live, false);
END
$$;

-- Live (unreleased, unexpired) leases of a community and their distinct operations.
CREATE FUNCTION deletion.live_serving_writes(
    p_community_id uuid, OUT live_count bigint, OUT operations text[])
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog AS $$
    SELECT count(*), coalesce(array_agg(DISTINCT l.operation ORDER BY l.operation), '{}')
      FROM deletion.serving_write_leases l
     WHERE l.community_id = p_community_id AND l.released_at IS NULL
       AND l.expires_at > clock_timestamp()
$$;

-- Deletes lease rows released or expired more than p_retain_secs ago; returns how many.
CREATE FUNCTION deletion.reap_serving_write_leases(p_retain_secs double precision) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog AS $$
DECLARE
    reaped bigint;
BEGIN
    IF p_retain_secs IS NULL OR p_retain_secs < 0 THEN
        RAISE EXCEPTION USING ERRCODE = '22023', MESSAGE = 'retention must be zero or more seconds';
    END IF;
    -- A row still inside `expires_at` + the protected-operation bound (30 s, the serving
    -- library's MAX_PROTECTED_OPERATION) is kept whatever the retention says: the drain reads it
    -- to wait out a writer that may still land (see docs/operations.md).
    DELETE FROM deletion.serving_write_leases l
     WHERE coalesce(l.released_at, l.expires_at)
           < clock_timestamp() - make_interval(secs => p_retain_secs)
       AND l.expires_at < clock_timestamp() - interval '30 seconds';
    GET DIAGNOSTICS reaped = ROW_COUNT;
    RETURN reaped;
END
$$;

-- Functions are executable by PUBLIC by default; in `deletion` only the worker may call them,
-- and the serving role only the lease functions (trigger functions need no EXECUTE when they
-- fire). The same holds for functions later migrations add: the owner's new functions are no
-- longer executable by PUBLIC; in `deletion` the worker gets them, in `buzz` both groups do (as
-- PUBLIC did before). A later SECURITY DEFINER function for the serving side must be granted to
-- buzz_deletion_serving explicitly.
REVOKE EXECUTE ON ALL FUNCTIONS IN SCHEMA deletion FROM PUBLIC;
GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA deletion TO buzz_deletion_worker;
ALTER DEFAULT PRIVILEGES REVOKE EXECUTE ON FUNCTIONS FROM PUBLIC;
ALTER DEFAULT PRIVILEGES IN SCHEMA deletion GRANT EXECUTE ON FUNCTIONS TO buzz_deletion_worker;
ALTER DEFAULT PRIVILEGES IN SCHEMA buzz
    GRANT EXECUTE ON FUNCTIONS TO buzz_deletion_worker, buzz_deletion_serving;
GRANT EXECUTE ON FUNCTION
    deletion.acquire_serving_write_lease(uuid, text, text, double precision),
    deletion.check_serving_write_lease(uuid, uuid, text, double precision),
    deletion.release_serving_write_lease(uuid, uuid, text),
    deletion.live_serving_writes(uuid),
    deletion.reap_serving_write_leases(double precision)
    TO buzz_deletion_serving;
