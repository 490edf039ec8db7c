-- claw memory store, schema version 5: a covering index for the freshness check.
-- Every search without a vouching watcher reads a source's stat listing
-- (`Store::stamp_listing`: path, mtime, size in path order); through the primary
-- key alone each row costs a seek into the table (whose rows also carry the
-- 64-byte hash), so the listing touched ~3x the pages. The check then reads the
-- index alone. No data changes.
CREATE INDEX files_stamps ON files (source, path, mtime, size);
