-- The closed-world catalogue check (issue 28): a materialized view reading tenant data is refused
-- unless its owner declares it `buzz-deletion: refreshed by the deletion` (its comment). Only a
-- view's owner may refresh it, so the owner of the migrations grants the refresh through this one
-- function: it refreshes a materialized view only while that declaration is its comment, and the
-- worker may call nothing else. The catalogue check refuses a declared view owned by anyone else.
CREATE FUNCTION buzz.refresh_declared_view(view regclass) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog AS $$
DECLARE
    declared text;
BEGIN
    IF (SELECT relkind FROM pg_catalog.pg_class WHERE oid = view) IS DISTINCT FROM 'm' THEN
        RAISE EXCEPTION USING ERRCODE = '42809',
            MESSAGE = format('%s is not a materialized view', view);
    END IF;
    declared := regexp_replace(btrim(coalesce(pg_catalog.obj_description(view, 'pg_class'), '')),
                               '\s+', ' ', 'g');
    IF declared NOT IN ('buzz-deletion: refreshed by the deletion',
                        'buzz-deletion:refreshed by the deletion') THEN
        RAISE EXCEPTION USING ERRCODE = '42501',
            MESSAGE = format('%s is not declared ''buzz-deletion: refreshed by the deletion''', view);
    END IF;
    EXECUTE format('REFRESH MATERIALIZED VIEW %s', view);
END
$$;
REVOKE ALL ON FUNCTION buzz.refresh_declared_view(regclass) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION buzz.refresh_declared_view(regclass) TO buzz_deletion_worker;
