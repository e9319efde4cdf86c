-- Serving-write leases are reaped in production, a bounded batch at a time (issue 30, part 2).
--
-- Every external serving write mints one lease row; before this migration only the `demo serve`
-- simulator ever reaped them, so `deletion.serving_write_leases` grew without bound under a real
-- relay. The worker now calls `deletion.reap_ended_serving_write_leases` on a timer. A row is
-- reapable once it proves nothing any more: released or expired, and past the stalled-writer
-- window (`expires_at` + the protected-operation bound, 30 s: a writer admitted under the lease
-- may land until then, and the drain reads the row to wait it out). A live lease, a stalled one
-- still inside its window, and a lease released early but not yet past its window are kept.
--
-- Bounded: at most p_limit rows per call, oldest first, skipping rows another reaper holds
-- (SKIP LOCKED), so two workers reaping at once neither block nor double-count. Idempotent: a
-- second call finds nothing the first deleted. Returns one row per kind ('community', 'user')
-- with the count reaped. Additive: a function and an index; nothing existing changes.

CREATE INDEX serving_write_leases_expiry_idx ON deletion.serving_write_leases (expires_at);

CREATE FUNCTION deletion.reap_ended_serving_write_leases(p_limit integer)
RETURNS TABLE (kind text, reaped bigint)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog AS $$
BEGIN
    IF p_limit IS NULL OR p_limit < 1 OR p_limit > 100000 THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('a reaping batch is 1 to 100000 rows, not %s', p_limit);
    END IF;
    RETURN QUERY
    WITH batch AS (
        SELECT l.id
          FROM deletion.serving_write_leases l
         WHERE l.expires_at < clock_timestamp() - interval '30 seconds'
           AND coalesce(l.released_at, l.expires_at) < clock_timestamp() - interval '30 seconds'
         ORDER BY l.expires_at
         LIMIT p_limit
           FOR UPDATE SKIP LOCKED
    ), gone AS (
        DELETE FROM deletion.serving_write_leases l
         USING batch
         WHERE l.id = batch.id
        RETURNING l.user_pubkey
    )
    SELECT CASE WHEN g.user_pubkey IS NULL THEN 'community' ELSE 'user' END, count(*)
      FROM gone g
     GROUP BY 1;
END
$$;

REVOKE EXECUTE ON FUNCTION deletion.reap_ended_serving_write_leases(integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION deletion.reap_ended_serving_write_leases(integer) TO buzz_deletion_worker;
