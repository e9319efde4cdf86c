-- The per-user write fence (issue 17, part 4): while one user is being deleted, nothing that
-- user writes may survive the deletion. Same shape as the community fence of 0001/0007:
--
--   * `deletion.user_fences`, one row per user (64-hex pubkey): serving → quiescing → fenced,
--     back to serving when a deletion is aborted before its irreversible point; every change
--     bumps `generation`;
--   * the user-data trigger every tenant relation already carries (0011, `buzz.user_data`) now
--     refuses, with SQLSTATE BZ006, an INSERT or UPDATE of a row whose declared user column names
--     a fenced user (on UPDATE also a row moved away from one);
--   * serving-write leases may carry the user they write for; acquiring one is refused once that
--     user is quiescing or fenced, and checking or renewing one once that user is fenced.
--
-- There is no user table, so a user may have no fence row when their deletion starts. A writer
-- that found no row could otherwise commit after the fence: the trigger and the lease function
-- therefore create the missing row (`serving`) before they lock it FOR SHARE. The fence creates
-- the row the same way, then takes it FOR UPDATE, so it always meets either the writer's row
-- lock or (while the writer's insert of the row is uncommitted) a wait on the unique index; it
-- cannot commit past a write that passed the trigger.
--
-- Lock order for serving writers: the user's fence row, then the community's (the
-- `buzz_user_data` trigger fires before `buzz_write_fence`, by name).

CREATE TABLE deletion.user_fences (
    pubkey     text PRIMARY KEY CHECK (pubkey ~ '^[0-9a-f]{64}$'),
    state      text   NOT NULL CHECK (state IN ('serving', 'quiescing', 'fenced')),
    generation bigint NOT NULL DEFAULT 0 CHECK (generation >= 0),
    request_id uuid,
    updated_at timestamptz NOT NULL DEFAULT now()
);
-- The worker reads and changes fence rows (SELECT, INSERT, UPDATE come from 0007's default
-- privileges; granted again here so the table does not depend on who ran this migration). The
-- serving side gets nothing: it reaches the row only through the SECURITY DEFINER functions.
GRANT SELECT, INSERT, UPDATE ON deletion.user_fences TO buzz_deletion_worker;
REVOKE ALL ON deletion.user_fences FROM buzz_deletion_serving;

-- The state of `p_pubkey`'s fence row, holding it FOR SHARE until the caller's transaction ends;
-- creates the row `serving` first when it is missing. NULL for a value that is not a 64-hex
-- pubkey: no user can be fenced under it (the table's check refuses such keys).
CREATE FUNCTION deletion.hold_user_fence(p_pubkey text) RETURNS text
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog AS $$
DECLARE
    fence_state text;
BEGIN
    IF p_pubkey IS NULL OR p_pubkey !~ '^[0-9a-f]{64}$' THEN
        RETURN NULL;
    END IF;
    SELECT f.state INTO fence_state FROM deletion.user_fences f
     WHERE f.pubkey = p_pubkey FOR SHARE;
    IF NOT FOUND THEN
        INSERT INTO deletion.user_fences (pubkey, state, generation)
        VALUES (p_pubkey, 'serving', 0) ON CONFLICT (pubkey) DO NOTHING;
        SELECT f.state INTO fence_state FROM deletion.user_fences f
         WHERE f.pubkey = p_pubkey FOR SHARE;
    END IF;
    RETURN fence_state;
END
$$;

-- The declaration trigger of 0011, now the per-user write fence. Its name, signature and
-- argument convention stay (the user-data catalog check requires exactly `buzz.user_data()`).
CREATE OR REPLACE FUNCTION buzz.user_data() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog AS $$
DECLARE
    new_pubkey text;
    old_pubkey text;
BEGIN
    IF TG_ARGV[0] = 'none' THEN
        RETURN NEW;
    END IF;
    new_pubkey := to_jsonb(NEW) ->> TG_ARGV[0];
    IF new_pubkey IS NOT NULL AND deletion.hold_user_fence(new_pubkey) = 'fenced' THEN
        RAISE EXCEPTION USING
            ERRCODE = 'BZ006',
            MESSAGE = format('user %s is fenced for deletion: writes to %s are refused',
                             new_pubkey, TG_TABLE_NAME);
    END IF;
    IF TG_OP = 'UPDATE' THEN
        old_pubkey := to_jsonb(OLD) ->> TG_ARGV[0];
        IF old_pubkey IS DISTINCT FROM new_pubkey AND old_pubkey IS NOT NULL
           AND deletion.hold_user_fence(old_pubkey) = 'fenced' THEN
            RAISE EXCEPTION USING
                ERRCODE = 'BZ006',
                MESSAGE = format('user %s is fenced for deletion: writes to %s are refused '
                                 '(its rows cannot move to another user)', old_pubkey, TG_TABLE_NAME);
        END IF;
    END IF;
    RETURN NEW;
END
$$;

-- ---------------------------------------------------------------------------------------------
-- Per-user serving-write leases. A user lease is an ordinary lease row (its community_id set as
-- always, so the community's drain and fence keep counting it) that also names the user.
ALTER TABLE deletion.serving_write_leases
    ADD COLUMN user_pubkey text CHECK (user_pubkey ~ '^[0-9a-f]{64}$');
CREATE INDEX serving_write_leases_live_user_idx ON deletion.serving_write_leases (user_pubkey)
    WHERE released_at IS NULL AND user_pubkey IS NOT NULL;

-- Admits one serving write made for a user: outcome 'acquired' (with the lease), 'quiescing' or
-- 'fenced' (the community's fence), 'user_quiescing' or 'user_fenced' (the user's), or
-- 'unknown_community'. Both fence rows are held FOR SHARE while the lease is inserted (the user's
-- first), so neither fence can commit without seeing the lease.
CREATE FUNCTION deletion.acquire_user_serving_write_lease(
    p_community_id uuid, p_pubkey text, p_operation text, p_owner text,
    p_ttl_secs double precision,
    OUT outcome text, OUT lease_id uuid, OUT fence_generation bigint, OUT expires_at timestamptz)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog AS $$
DECLARE
    fence_state text;
    user_state text;
BEGIN
    IF coalesce(length(trim(p_operation)), 0) = 0 OR coalesce(length(trim(p_owner)), 0) = 0 THEN
        RAISE EXCEPTION USING ERRCODE = '22023', MESSAGE = 'a lease needs an operation and an owner';
    END IF;
    IF p_ttl_secs IS NULL OR NOT p_ttl_secs > 0 OR p_ttl_secs > 86400 THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('lease ttl %s s is outside (0, 86400]', p_ttl_secs);
    END IF;
    IF p_pubkey IS NULL OR p_pubkey !~ '^[0-9a-f]{64}$' THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('user %L is not a 64-hex lowercase pubkey', p_pubkey);
    END IF;
    IF NOT EXISTS (SELECT 1 FROM deletion.community_fences f WHERE f.community_id = p_community_id)
       AND NOT EXISTS (SELECT 1 FROM buzz.communities c WHERE c.id = p_community_id) THEN
        outcome := 'unknown_community';
        RETURN;
    END IF;
    user_state := deletion.hold_user_fence(p_pubkey);
    SELECT f.state, f.generation INTO fence_state, fence_generation
      FROM deletion.community_fences f WHERE f.community_id = p_community_id FOR SHARE;
    IF NOT FOUND THEN
        INSERT INTO deletion.community_fences (community_id, state, generation)
        VALUES (p_community_id, 'serving', 0) ON CONFLICT (community_id) DO NOTHING;
        SELECT f.state, f.generation INTO fence_state, fence_generation
          FROM deletion.community_fences f WHERE f.community_id = p_community_id FOR SHARE;
    END IF;
    IF fence_state <> 'serving' THEN
        outcome := fence_state;
        RETURN;
    END IF;
    IF user_state <> 'serving' THEN
        outcome := 'user_' || user_state;
        RETURN;
    END IF;
    lease_id := gen_random_uuid();
    INSERT INTO deletion.serving_write_leases
        (id, community_id, user_pubkey, operation, owner, fence_generation, expires_at)
    VALUES (lease_id, p_community_id, p_pubkey, p_operation, p_owner, fence_generation,
            clock_timestamp() + make_interval(secs => p_ttl_secs))
    RETURNING serving_write_leases.expires_at INTO expires_at;
    outcome := 'acquired';
END
$$;

-- 0007's check, extended: a lease carrying a user is also refused ('user_fenced') once that user
-- is fenced. Renewal stays allowed while the community or the user is quiescing.
CREATE OR REPLACE FUNCTION deletion.check_serving_write_lease(
    p_lease_id uuid, p_community_id uuid, p_owner text, p_renew_secs double precision,
    OUT outcome text, OUT expires_at timestamptz)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog AS $$
DECLARE
    fence_state text;
    lease_user text;
    lease record;
BEGIN
    IF p_renew_secs IS NOT NULL AND (NOT p_renew_secs > 0 OR p_renew_secs > 86400) THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('lease ttl %s s is outside (0, 86400]', p_renew_secs);
    END IF;
    SELECT l.user_pubkey INTO lease_user FROM deletion.serving_write_leases l
     WHERE l.id = p_lease_id AND l.community_id = p_community_id;
    IF lease_user IS NOT NULL AND deletion.hold_user_fence(lease_user) = 'fenced' THEN
        outcome := 'user_fenced';
        RETURN;
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

-- Live (unreleased, unexpired) leases written for a user, in any community, and their distinct
-- operations: what the user fence waits for.
CREATE FUNCTION deletion.live_user_serving_writes(
    p_pubkey text, OUT live_count bigint, OUT operations text[])
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog AS $$
    SELECT count(*), coalesce(array_agg(DISTINCT l.operation ORDER BY l.operation), '{}')
      FROM deletion.serving_write_leases l
     WHERE l.user_pubkey = p_pubkey AND l.released_at IS NULL
       AND l.expires_at > clock_timestamp()
$$;

-- The worker gets every new `deletion` function by 0007's default privileges; the serving side
-- only these, explicitly. `hold_user_fence` is for the trigger and the lease functions only.
REVOKE EXECUTE ON FUNCTION deletion.hold_user_fence(text) FROM PUBLIC, buzz_deletion_serving;
GRANT EXECUTE ON FUNCTION
    deletion.acquire_user_serving_write_lease(uuid, text, text, text, double precision),
    deletion.live_user_serving_writes(text)
    TO buzz_deletion_serving;
