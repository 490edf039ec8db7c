-- claw memory store, schema version 3.
-- The word index stems English: FTS5's `porter` tokenizer over `unicode61`
-- (diacritics removed), so `retries`, `retrying` and `retried` meet `retry`.
-- Query terms go through the same tokenizer. The trigram index (CJK, substrings,
-- verbatim identifiers) is unchanged. The index is rebuilt from `chunks` here;
-- the chunker identity was bumped with this migration, so the next
-- `claw memory index` rebuilds the whole index once as well.
DROP TRIGGER IF EXISTS chunks_ai;
DROP TRIGGER IF EXISTS chunks_ad;
DROP TABLE IF EXISTS chunks_fts;

CREATE VIRTUAL TABLE chunks_fts USING fts5 (
    text,
    content = 'chunks',
    content_rowid = 'rowid',
    tokenize = 'porter unicode61 remove_diacritics 2'
);

CREATE TRIGGER chunks_ai AFTER INSERT ON chunks BEGIN
    INSERT INTO chunks_fts (rowid, text) VALUES (new.rowid, new.text);
    INSERT INTO chunks_trigram (rowid, text) VALUES (new.rowid, new.text);
END;

CREATE TRIGGER chunks_ad AFTER DELETE ON chunks BEGIN
    INSERT INTO chunks_fts (chunks_fts, rowid, text) VALUES ('delete', old.rowid, old.text);
    INSERT INTO chunks_trigram (chunks_trigram, rowid, text) VALUES ('delete', old.rowid, old.text);
END;

INSERT INTO chunks_fts (chunks_fts) VALUES ('rebuild');
