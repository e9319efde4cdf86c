-- Manifest chunk entries compressed with lz4 instead of pglz (issue 32, part 4: the per-chunk cost
-- of the proof). Catalogue only: no row is rewritten and nothing a worker reads or writes changes.
--
-- Each chunk's entries are about 150 KB of text (1,000 encoded versions), which PostgreSQL
-- compresses when it stores the row. Measured on 200 real chunks of the S3 benchmark: pglz costs
-- 1.03 ms per chunk inserted and 0.37 ms per chunk read back (7.7 KB stored); lz4 costs 0.50 ms
-- and 0.31 ms (9.2 KB stored). The freeze writes every chunk once and the delete loop reads it
-- once, so this is PostgreSQL CPU saved on every version of every deletion, for about 20 % more
-- space in a table whose rows are dropped with their request's retention.
--
-- Rows stored before this migration stay pglz-compressed: PostgreSQL records the method with each
-- value and reads both, so old and new workers read every chunk as before. A server built without
-- lz4 refuses the method with feature_not_supported: the column then keeps pglz and the migration
-- still succeeds (the notice says so), as the choice only affects speed.
DO $$
BEGIN
    ALTER TABLE deletion.manifest_chunks ALTER COLUMN entries SET COMPRESSION lz4;
EXCEPTION WHEN feature_not_supported THEN
    RAISE NOTICE 'this PostgreSQL server was built without lz4: deletion.manifest_chunks.entries '
        'keeps pglz compression (slower chunk writes and reads, nothing else changes)';
END
$$;
