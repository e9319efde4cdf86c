-- Makes every schema change in the buzz-deletion database visible: each DDL command (CREATE,
-- ALTER ... DISABLE TRIGGER, DROP TRIGGER, ...) appends a `schema_changed` row to
-- deletion.audit_events and a LOG line to the server log. Only the owner role can run DDL on the
-- buzz and deletion schemas, so this is the record of the owner's use (migrations included).
--
-- Run it as a superuser in the buzz-deletion database (CREATE EVENT TRIGGER needs one); it is
-- idempotent. deploy/local/up runs it; production runs it once per database (docs/production.md).
-- The function is SECURITY DEFINER (owned by the superuser) so the record is written whoever
-- changed the schema, and it lives in `public`, outside the schemas the owner role owns.

CREATE OR REPLACE FUNCTION public.buzz_record_schema_change() RETURNS event_trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog AS $$
DECLARE
    objects jsonb := '[]'::jsonb;
    temporary integer := 0;
    item record;
BEGIN
    IF TG_EVENT = 'sql_drop' THEN
        FOR item IN SELECT object_type, object_identity, schema_name
                      FROM pg_event_trigger_dropped_objects() LOOP
            IF item.schema_name LIKE 'pg\_temp%' THEN
                temporary := temporary + 1;
            ELSE
                objects := objects || jsonb_build_object('type', item.object_type,
                                                         'identity', item.object_identity);
            END IF;
        END LOOP;
    ELSE
        FOR item IN SELECT object_type, object_identity, schema_name, in_extension
                      FROM pg_event_trigger_ddl_commands() LOOP
            IF item.schema_name LIKE 'pg\_temp%' THEN
                temporary := temporary + 1;
            ELSE
                objects := objects || jsonb_build_object('type', item.object_type,
                                                         'identity', item.object_identity);
            END IF;
        END LOOP;
    END IF;
    -- A session's own temporary objects change nothing anyone else relies on.
    IF temporary > 0 AND jsonb_array_length(objects) = 0 THEN
        RETURN;
    END IF;
    RAISE LOG 'buzz-deletion schema change by % (as %): % %', session_user, current_user, TG_TAG,
        objects;
    IF to_regclass('deletion.audit_events') IS NOT NULL THEN
        EXECUTE 'INSERT INTO deletion.audit_events (actor, event, detail) VALUES ($1, $2, $3)'
        USING session_user::text, 'schema_changed',
              jsonb_build_object('event', TG_EVENT, 'command', TG_TAG,
                                 'current_user', current_user::text, 'objects', objects,
                                 'statement', left(current_query(), 2000));
    END IF;
END
$$;
REVOKE ALL ON FUNCTION public.buzz_record_schema_change() FROM PUBLIC;

DROP EVENT TRIGGER IF EXISTS buzz_record_schema_change;
CREATE EVENT TRIGGER buzz_record_schema_change ON ddl_command_end
    EXECUTE FUNCTION public.buzz_record_schema_change();
DROP EVENT TRIGGER IF EXISTS buzz_record_schema_drop;
CREATE EVENT TRIGGER buzz_record_schema_drop ON sql_drop
    EXECUTE FUNCTION public.buzz_record_schema_change();
