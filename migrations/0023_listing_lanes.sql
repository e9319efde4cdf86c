-- A freeze that lists each tenant prefix in four key ranges at once (issue 32, part 5: listing
-- and freeze that scale). Additive: three nullable columns on the chunk rows, NULL on every row
-- written before; nothing existing changes.
--
-- A freeze stores each chunk with the key range ("lane") of its prefix that its entries were
-- listed in, and resumes each lane after the last key that lane stored whole:
--
--   lane_after             the lane's exclusive lower bound; NULL from the prefix's first key
--   lane_through           the lane's inclusive upper bound; NULL to the prefix's last key
--   lane_resume_after_key  for a lane with a bound, the chunk's last key when every version of
--                          that key is in this chunk or an earlier chunk of its lane; NULL when
--                          it ends inside a key's versions
--
-- A chunk with both bounds NULL lies in a lane that is the whole prefix, which is what every row
-- written before this migration is: it keeps using `resume_after_key` (0021), as before.
--
-- A chunk of a bounded lane leaves `resume_after_key` NULL. A worker released before this
-- migration resumes a prefix after the last chunk carrying `resume_after_key`; finding none, it
-- lists the prefix from its first key and skips every version already stored: slower, but
-- complete. Were that column set, it would resume after one lane's key and skip the other lanes'
-- keys not yet stored. The constraints hold both rules for every writer, whatever its release.
ALTER TABLE deletion.manifest_chunks ADD COLUMN lane_after text;
ALTER TABLE deletion.manifest_chunks ADD COLUMN lane_through text;
ALTER TABLE deletion.manifest_chunks ADD COLUMN lane_resume_after_key text;
ALTER TABLE deletion.manifest_chunks ADD CONSTRAINT manifest_chunks_bounded_lane_own_resume_key
    CHECK ((lane_after IS NULL AND lane_through IS NULL) OR resume_after_key IS NULL);
ALTER TABLE deletion.manifest_chunks ADD CONSTRAINT manifest_chunks_lane_resume_key_when_bounded
    CHECK (lane_resume_after_key IS NULL OR lane_after IS NOT NULL OR lane_through IS NOT NULL);
