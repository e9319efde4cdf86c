-- Who a tenant row belongs to (issue 17, real user deletion): every tenant table DECLARES which
-- of its columns holds the 64-hex public key of the user the row belongs to, or that it holds no
-- user data — declared, never guessed, in the spirit of Meta's DELF annotations.
--
-- The declaration lives in the schema itself, as a trigger every tenant relation carries:
--
--     CREATE TRIGGER buzz_user_data BEFORE INSERT OR UPDATE ON buzz.<table>
--         FOR EACH ROW EXECUTE FUNCTION buzz.user_data('<column>' | 'none');
--     ALTER TABLE buzz.<table> ENABLE ALWAYS TRIGGER buzz_user_data;
--
-- so that (1) a tenant table added later without one is refused by the user-data catalog check
-- (`activities::store::user_data`), naming it, before any user inventory is taken; (2) changing a
-- declaration is DDL, which the owner's DDL audit records (deploy/postgres/owner_ddl_audit.sql);
-- and (3) the per-user write fence of a user deletion runs in this very trigger, on the declared
-- column, so the column the inventory reads and the column the fence guards cannot disagree.
-- Until that fence exists the function only lets the row through.

-- Attribution that was missing: who uploaded a media object. Rows written before this migration
-- have none (NULL): no user is the uploader of record.
ALTER TABLE buzz.media_uploads
    ADD COLUMN uploader_pubkey text CHECK (uploader_pubkey ~ '^[0-9a-f]{64}$');

CREATE FUNCTION buzz.user_data() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog AS $$
BEGIN
    RETURN NEW;
END
$$;
COMMENT ON FUNCTION buzz.user_data() IS
    'Declares (by its one argument) the column of a tenant row holding the pubkey of the user it belongs to, or none; the per-user write fence runs here.';

DO $$
DECLARE
    declaration text[];
BEGIN
    FOREACH declaration SLICE 1 IN ARRAY ARRAY[
        ['channels', 'none'],             -- a channel is the community's; no creator is recorded
        ['events', 'pubkey'],             -- the event's author
        ['memberships', 'pubkey'],        -- the member
        ['pubkey_allowlist', 'pubkey'],   -- the allow-listed user
        ['agents', 'pubkey'],             -- the user the agent acts for
        ['media_uploads', 'uploader_pubkey']  -- the uploader
    ] LOOP
        EXECUTE format('CREATE TRIGGER buzz_user_data BEFORE INSERT OR UPDATE ON buzz.%I
                        FOR EACH ROW EXECUTE FUNCTION buzz.user_data(%L)',
                       declaration[1], declaration[2]);
        EXECUTE format('ALTER TABLE buzz.%I ENABLE ALWAYS TRIGGER buzz_user_data', declaration[1]);
    END LOOP;
END
$$;
