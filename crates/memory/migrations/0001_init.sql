-- claw memory store, schema version 1.
-- `chunks` is the source of truth for indexed text and vectors; the FTS5 and
-- vec0 tables are indexes derived from it (vec0 tables are created at run time
-- by the store because their dimension comes from the embedding model).

CREATE TABLE meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
) WITHOUT ROWID;

-- User-registered notes folders (`claw memory add`). The built-in sources
-- `memory` and `sessions` live in the workspace and are not stored here.
CREATE TABLE sources (
    name     TEXT PRIMARY KEY,
    root     TEXT NOT NULL UNIQUE,
    added_at INTEGER NOT NULL
) WITHOUT ROWID;

CREATE TABLE files (
    source     TEXT NOT NULL,
    path       TEXT NOT NULL,             -- relative to the source root, '/'-separated
    sha256     TEXT NOT NULL,
    mtime      INTEGER NOT NULL,          -- nanoseconds since the epoch
    size       INTEGER NOT NULL,
    indexed_at INTEGER NOT NULL,          -- unix seconds
    indexed_bytes INTEGER NOT NULL DEFAULT 0,  -- transcripts: byte offset already indexed
    indexed_lines INTEGER NOT NULL DEFAULT 0,  -- transcripts: lines already indexed
    PRIMARY KEY (source, path)
) WITHOUT ROWID;

CREATE TABLE chunks (
    rowid      INTEGER PRIMARY KEY,       -- join key for the FTS5 and vec0 tables
    id         TEXT NOT NULL UNIQUE,      -- sha256(source:path:start:end:hash:model)
    source     TEXT NOT NULL,
    path       TEXT NOT NULL,
    start_line INTEGER NOT NULL,          -- 1-based, inclusive
    end_line   INTEGER NOT NULL,          -- 1-based, inclusive
    hash       TEXT NOT NULL,             -- sha256 of the chunk text
    model      TEXT NOT NULL,             -- embedding model id, '' when keyword-only
    text       TEXT NOT NULL,
    updated_at INTEGER NOT NULL,          -- unix seconds
    note_time  INTEGER,                   -- unix seconds used for decay; NULL = evergreen
    embedding  BLOB                       -- little-endian f32 x dims, NULL when keyword-only
);
CREATE INDEX chunks_by_file ON chunks (source, path);

-- Word index (English and other space-separated languages).
CREATE VIRTUAL TABLE chunks_fts USING fts5 (
    text,
    content = 'chunks',
    content_rowid = 'rowid',
    tokenize = 'unicode61 remove_diacritics 2'
);

-- Substring index for CJK and identifiers (queries of three or more characters).
CREATE VIRTUAL TABLE chunks_trigram USING fts5 (
    text,
    content = 'chunks',
    content_rowid = 'rowid',
    tokenize = 'trigram'
);

CREATE TRIGGER chunks_ai AFTER INSERT ON chunks BEGIN
    INSERT INTO chunks_fts (rowid, text) VALUES (new.rowid, new.text);
    INSERT INTO chunks_trigram (rowid, text) VALUES (new.rowid, new.text);
END;

CREATE TRIGGER chunks_ad AFTER DELETE ON chunks BEGIN
    INSERT INTO chunks_fts (chunks_fts, rowid, text) VALUES ('delete', old.rowid, old.text);
    INSERT INTO chunks_trigram (chunks_trigram, rowid, text) VALUES ('delete', old.rowid, old.text);
END;

CREATE TABLE embedding_cache (
    provider   TEXT NOT NULL,
    model      TEXT NOT NULL,
    hash       TEXT NOT NULL,             -- sha256 of the embedded text
    embedding  BLOB NOT NULL,             -- little-endian f32 x dims
    dims       INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (provider, model, hash)
) WITHOUT ROWID;
CREATE INDEX embedding_cache_age ON embedding_cache (updated_at);

-- Liveness of `claw memory watch` (one row per watcher process).
CREATE TABLE watcher (
    pid         INTEGER PRIMARY KEY,
    started_at  INTEGER NOT NULL,
    heartbeat   INTEGER NOT NULL,
    last_event  INTEGER,
    last_sync   INTEGER,
    pending     INTEGER NOT NULL DEFAULT 0
);
