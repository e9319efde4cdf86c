-- Late manifest chunks: object versions that appeared under a tenant prefix after the
-- destructive manifest was frozen (a stalled serving writer, or one that bypassed the lease
-- library). Verification blocks on them; the operator's unblock appends them as new chunks of the
-- same request, numbered after the frozen ones, and deletes and stamps them like any chunk.
-- `late_at` is NULL for the frozen (bound) chunks and set when a late chunk is appended.
ALTER TABLE deletion.manifest_chunks ADD COLUMN late_at timestamptz;

-- The digest of a late chunk's entries (order-independent, as the frozen prefixes' digests), so
-- the audit trail binds exactly what was appended.
ALTER TABLE deletion.manifest_chunks ADD COLUMN late_digest text;

ALTER TABLE deletion.manifest_chunks ADD CONSTRAINT manifest_chunks_late_digest_with_late_at
    CHECK ((late_at IS NULL) = (late_digest IS NULL));
