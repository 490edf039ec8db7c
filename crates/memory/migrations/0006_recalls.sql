-- claw memory store, schema version 6: how often searches return each chunk.
-- Every search through the memory service (the CLI, the assistant's
-- `memory_search`, the gateway, MCP) adds one to each hit it returns
-- (`Store::record_recalls`); the scheduled consolidation ranks its candidates by
-- these counts (`claw memory consolidate`). A chunk is named by its place
-- (source, path, lines), the citation a search prints, so the count survives a
-- re-index of an unchanged file; a rebuild copies the table. Usage data, not
-- index data: `reset_index` keeps it.
CREATE TABLE recalls (
    source     TEXT NOT NULL,
    path       TEXT NOT NULL,             -- relative to the source root, '/'-separated
    start_line INTEGER NOT NULL,          -- 1-based, inclusive
    end_line   INTEGER NOT NULL,          -- 1-based, inclusive
    count      INTEGER NOT NULL,          -- searches that returned it
    first_at   INTEGER NOT NULL,          -- unix seconds of the first
    last_at    INTEGER NOT NULL,          -- unix seconds of the latest
    PRIMARY KEY (source, path, start_line, end_line)
) WITHOUT ROWID;
