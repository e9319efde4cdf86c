-- A freeze that resumes where it stopped, and a bind that does not re-read the manifest (issue 32,
-- part 5). Additive: three nullable columns on the chunk rows; nothing existing changes.
--
-- Each chunk the freeze stores carries what the next attempt needs to continue the listing after
-- it instead of from the start, and what the bind needs to check the prefixes' digests without
-- reading every entry again in the transaction that holds the request:
--
--   digest_sum        the running sum of the chunk's entry hashes (the order-independent key
--                     stream digest before it is finished), 64 lowercase hex digits, computed by
--                     the store from the entries it inserts. A prefix's digest is the sum of its
--                     chunks' sums; the delete loop re-checks each chunk's entries against it
--                     before it deletes them.
--   bytes             the bytes of the chunk's object versions (the listing's sizes), summed
--                     into the prefix's summary when a freeze resumes.
--   resume_after_key  the chunk's last key when every version of that key is in this chunk or an
--                     earlier one (a listing may continue after it); NULL when the chunk ends in
--                     the middle of a key's versions.
--
-- Rows written before this migration keep NULL in all three: a freeze that finds such rows clears
-- them and lists from the start (as before), and a bound manifest without them is deleted as
-- before.
ALTER TABLE deletion.manifest_chunks ADD COLUMN digest_sum text
    CONSTRAINT manifest_chunks_digest_sum_hex CHECK (digest_sum ~ '^[0-9a-f]{64}$');
ALTER TABLE deletion.manifest_chunks ADD COLUMN bytes bigint
    CONSTRAINT manifest_chunks_bytes_not_negative CHECK (bytes >= 0);
ALTER TABLE deletion.manifest_chunks ADD COLUMN resume_after_key text;
