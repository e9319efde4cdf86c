-- The irreversible marker is set only once S3 has acknowledged a destructive call (issue 30).
--
-- Until now `irreversible_at` was set right before a community deletion's first DeleteObjects,
-- so a worker without `s3:DeleteObjectVersion` (or `s3:AbortMultipartUpload`) left a request that
-- had deleted nothing and could no longer be aborted. Now an attempt records
-- `irreversible_pending_at` right before its first destructive S3 call (a version delete or an
-- upload abort) while `irreversible_at` is still NULL, and resolves it once S3's answer is known:
--
-- - S3 acknowledged at least one deletion or abort: `irreversible_at` is set and the pending
--   record cleared, in one transaction (audit event `irreversible`);
-- - S3 refused every call of the attempt whole (AccessDenied, …): the pending record is cleared
--   and `irreversible_at` stays NULL (audit event `destructive_calls_refused`): the request can
--   still be aborted;
-- - the answer is unknown (a timeout, a 5xx, a crash): `irreversible_at` is set, conservatively.
--
-- While the pending record is set an abort is neither accepted nor refused: it fails transiently
-- and is retried, because a call in flight may be deleting. A pending record left by a crashed
-- attempt is resolved by the next attempt, conservatively.
--
-- Additive: one nullable column (no default, no rewrite) and a check that both can never be set
-- at once, which every existing row satisfies (the new column is NULL). The worker role's
-- table-level UPDATE grant (0007) covers the column.
ALTER TABLE deletion.requests ADD COLUMN irreversible_pending_at timestamptz;
ALTER TABLE deletion.requests ADD CONSTRAINT irreversible_pending_before_the_marker
    CHECK (irreversible_pending_at IS NULL OR irreversible_at IS NULL);
