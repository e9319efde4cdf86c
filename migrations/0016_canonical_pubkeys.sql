-- A pubkey is compared in one canonical form (issue 29): every declared user column (0011's
-- `buzz_user_data` declarations) holds the user's public key as exactly 64 lowercase hex
-- characters, or NULL (the row belongs to no user), guaranteed by a validated CHECK constraint
--
--     CHECK (<column> ~ '^[0-9a-f]{64}$')
--
-- A user deletion's target is that same canonical text (`user:<64 lowercase hex>`, refused
-- otherwise at submit), and the inventory, the purge, the per-user write fence and the
-- verification all compare the declared column to it with `=`. A row holding the same key in
-- upper or mixed case would match none of them: it would be neither counted, nor fenced, nor
-- deleted, nor found by the verification. From here on such a row cannot be written, and the
-- user-data catalogue check (`activities::store::user_data`) refuses a declared column without
-- this guarantee, naming it, so a tenant table added later cannot reopen the gap.
--
-- `media_uploads.uploader_pubkey` has carried exactly this constraint since 0011; the four other
-- shipped declared columns get it here. Existing rows are checked first: if any holds a value
-- that is not canonical, the migration refuses (nothing is changed), naming each table, column
-- and the number of such rows, so that the operator can canonicalise them deliberately (the
-- remedy is in docs/operations.md, "Migration 0016 refused: pubkeys not in canonical form")
-- rather than have this migration rewrite user data. The count takes no lock beyond a read's; each
-- ADD CONSTRAINT then checks every row of its table again under an ACCESS EXCLUSIVE lock (reads
-- and writes of that table wait until the migration commits), so a non-canonical row written
-- between the count and the constraint still fails the migration, with PostgreSQL's "violated by
-- some row" naming the constraint, and a second run counts it.
DO $$
DECLARE
    declared text[];
    violating bigint;
    problems text[] := '{}';
BEGIN
    FOREACH declared SLICE 1 IN ARRAY ARRAY[
        ['events', 'pubkey'],
        ['memberships', 'pubkey'],
        ['pubkey_allowlist', 'pubkey'],
        ['agents', 'pubkey'],
        ['media_uploads', 'uploader_pubkey']
    ] LOOP
        EXECUTE format('SELECT count(*) FROM buzz.%I WHERE %I !~ %L',
                       declared[1], declared[2], '^[0-9a-f]{64}$')
            INTO violating;
        IF violating > 0 THEN
            problems := problems || format('buzz.%s.%s: %s row(s)',
                                           declared[1], declared[2], violating);
        END IF;
    END LOOP;
    IF cardinality(problems) > 0 THEN
        RAISE EXCEPTION USING
            MESSAGE = format(
                'migration 0016 refused: declared user columns hold pubkeys that are not 64 '
                'lowercase hex characters (%s); nothing was changed. Rewrite each such value to '
                'its canonical form (a hex key in upper or mixed case: lower(column); anything '
                'else is not a pubkey: correct or delete the row, merging duplicates first), then '
                'run buzz-deletion migrate again (docs/operations.md, "Migration 0016 refused: '
                'pubkeys not in canonical form")',
                array_to_string(problems, '; '));
    END IF;
END
$$;

ALTER TABLE buzz.events
    ADD CONSTRAINT events_pubkey_canonical CHECK (pubkey ~ '^[0-9a-f]{64}$');
ALTER TABLE buzz.memberships
    ADD CONSTRAINT memberships_pubkey_canonical CHECK (pubkey ~ '^[0-9a-f]{64}$');
ALTER TABLE buzz.pubkey_allowlist
    ADD CONSTRAINT pubkey_allowlist_pubkey_canonical CHECK (pubkey ~ '^[0-9a-f]{64}$');
ALTER TABLE buzz.agents
    ADD CONSTRAINT agents_pubkey_canonical CHECK (pubkey ~ '^[0-9a-f]{64}$');
