-- claw memory store, schema version 3.
-- Files left out of the index for a cause in the file itself (too big, binary),
-- with the stat they had: an unchanged skipped file is not "new" again on every
-- freshness check, and a changed one is re-examined. Rows go when the file is
-- indexed (`write_file`), gone from disk, its source removed, or the index reset.
CREATE TABLE skipped_files (
    source     TEXT NOT NULL,
    path       TEXT NOT NULL,             -- relative to the source root, '/'-separated
    mtime      INTEGER NOT NULL,          -- nanoseconds since the epoch
    size       INTEGER NOT NULL,
    reason     TEXT NOT NULL,             -- walk::IssueReason as a snake_case name
    message    TEXT NOT NULL,             -- what the index report said
    skipped_at INTEGER NOT NULL,          -- unix seconds
    PRIMARY KEY (source, path)
) WITHOUT ROWID;
