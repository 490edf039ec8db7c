-- claw memory store, schema version 4: the word index holds stems behind each
-- chunk's context (`crate::words`), made in Rust, not FTS5's view of `chunks.text`.
-- `chunks.context` is where the chunk is (file title › heading path). `chunks_fts`
-- becomes contentless (its text is `words::index_words(context, text)`, written by
-- `Store::write_file`, never stored twice); rows leave it by rowid. The trigram
-- index still indexes `chunks.text` as it is. The index identity
-- (`chunk::CHUNKER_VERSION`) changed with this, so an existing index is rebuilt once
-- by the next `claw memory index` (a search says so).
ALTER TABLE chunks ADD COLUMN context TEXT NOT NULL DEFAULT '';

DROP TRIGGER chunks_ai;
DROP TRIGGER chunks_ad;
DROP TABLE chunks_fts;

CREATE VIRTUAL TABLE chunks_fts USING fts5 (
    words,
    content = '',
    contentless_delete = 1,
    tokenize = 'unicode61 remove_diacritics 2'
);

-- Until the rebuild, the old chunks stay findable by their words (unstemmed).
INSERT INTO chunks_fts (rowid, words) SELECT rowid, text FROM chunks;

CREATE TRIGGER chunks_ai AFTER INSERT ON chunks BEGIN
    INSERT INTO chunks_trigram (rowid, text) VALUES (new.rowid, new.text);
END;

CREATE TRIGGER chunks_ad AFTER DELETE ON chunks BEGIN
    DELETE FROM chunks_fts WHERE rowid = old.rowid;
    INSERT INTO chunks_trigram (chunks_trigram, rowid, text) VALUES ('delete', old.rowid, old.text);
END;
