-- The transparency log's right edge, kept with each signed checkpoint: the roots of the perfect
-- subtrees its leaves decompose into, largest first, 64 lowercase hex characters each, one per
-- set bit of tree_size (RFC 6962's compact range). An append reads the latest checkpoint's edge
-- instead of every leaf, so completing a deletion costs the same with ten receipts in the log as
-- with a million. NULL on checkpoints signed before this migration: the next append computes the
-- edge from the stored leaves once, as every append did before.
ALTER TABLE deletion.log_checkpoints ADD COLUMN frontier text[]
    CHECK (frontier IS NULL
           OR (cardinality(frontier) = bit_count(tree_size::bit(64))
               AND array_to_string(frontier, '') ~ '^([0-9a-f]{64})*$'));
