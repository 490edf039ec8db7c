-- claw memory on PostgreSQL: schema version 1. Applied by claw-memory-pg on connect,
-- inside the target schema (search_path), under a transaction-level advisory lock.
-- Every indexed row is owned by (namespace, workspace, source): `workspace` is the
-- stable id kept in the writing workspace's state dir (.claw/workspace-id), so two
-- machines' built-in `memory` and `sessions` sources never collide.

CREATE TABLE meta (
    namespace TEXT NOT NULL,
    key       TEXT NOT NULL,
    value     TEXT NOT NULL,
    PRIMARY KEY (namespace, key)
);

CREATE TABLE sources (
    namespace  TEXT NOT NULL,
    workspace  TEXT NOT NULL,
    name       TEXT NOT NULL,
    root       TEXT NOT NULL,
    added_at   BIGINT NOT NULL,
    follow_symlinks_outside BOOLEAN NOT NULL DEFAULT FALSE,
    PRIMARY KEY (namespace, workspace, name)
);

CREATE TABLE files (
    namespace     TEXT NOT NULL,
    workspace     TEXT NOT NULL,
    source        TEXT NOT NULL,
    path          TEXT NOT NULL,
    sha256        TEXT NOT NULL,
    mtime         BIGINT NOT NULL,
    size          BIGINT NOT NULL,
    indexed_at    BIGINT NOT NULL,
    indexed_bytes BIGINT NOT NULL DEFAULT 0,
    indexed_lines BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (namespace, workspace, source, path)
);

CREATE TABLE chunks (
    rowid      BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    namespace  TEXT NOT NULL,
    workspace  TEXT NOT NULL,
    source     TEXT NOT NULL,
    path       TEXT NOT NULL,
    id         TEXT NOT NULL,
    start_line INTEGER NOT NULL,
    end_line   INTEGER NOT NULL,
    hash       TEXT NOT NULL,
    model      TEXT NOT NULL,
    text       TEXT NOT NULL,
    updated_at BIGINT NOT NULL,
    note_time  BIGINT,
    dims       INTEGER,
    -- Untyped so one database can hold namespaces of different models; the HNSW
    -- index is per dimension, on `embedding::vector(N)` (created by reset_index).
    embedding  vector,
    -- Same tokenisation as SQLite's FTS5 `unicode61` (lower-cased words, no stemming).
    tsv        tsvector GENERATED ALWAYS AS (to_tsvector('simple', text)) STORED,
    UNIQUE (namespace, workspace, id),
    FOREIGN KEY (namespace, workspace, source, path)
        REFERENCES files (namespace, workspace, source, path) ON DELETE CASCADE
);
CREATE INDEX chunks_file ON chunks (namespace, workspace, source, path);
CREATE INDEX chunks_hash ON chunks (hash, model);
CREATE INDEX chunks_tsv ON chunks USING gin (tsv);
-- Substring search for CJK runs, short queries and verbatim identifiers.
CREATE INDEX chunks_trgm ON chunks USING gin (text gin_trgm_ops);

CREATE TABLE embedding_cache (
    namespace  TEXT NOT NULL,
    provider   TEXT NOT NULL,
    model      TEXT NOT NULL,
    hash       TEXT NOT NULL,
    embedding  vector NOT NULL,
    dims       INTEGER NOT NULL,
    updated_at BIGINT NOT NULL,
    PRIMARY KEY (namespace, provider, model, hash)
);
CREATE INDEX embedding_cache_age ON embedding_cache (namespace, updated_at);
