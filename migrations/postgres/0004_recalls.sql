-- claw memory on PostgreSQL: schema version 4, the recall counts of SQLite's schema 6.
-- Every search through the memory service adds one to each hit it returns; the
-- scheduled consolidation ranks its candidates by these counts. Rows are owned
-- by the searching workspace (a search sees every workspace's chunks, but counts
-- what this workspace's user recalled); a chunk is named by its place (source,
-- path, lines), so the count survives a re-index of an unchanged file. Usage
-- data, not index data: `reset_index` keeps it.
CREATE TABLE recalls (
    namespace  TEXT NOT NULL,
    workspace  TEXT NOT NULL,
    source     TEXT NOT NULL,
    path       TEXT NOT NULL,
    start_line INTEGER NOT NULL,
    end_line   INTEGER NOT NULL,
    count      BIGINT NOT NULL,
    first_at   BIGINT NOT NULL,
    last_at    BIGINT NOT NULL,
    PRIMARY KEY (namespace, workspace, source, path, start_line, end_line)
);
