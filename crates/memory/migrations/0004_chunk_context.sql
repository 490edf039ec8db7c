-- claw memory store, schema version 4.
-- Each chunk knows where it is: `context` holds its file's title (first heading,
-- else the file name) and the heading path at its first line ("Title › Section ›
-- Sub"). The word index gets it as a second column with its own BM25 weight
-- (the `rank` configuration below); the trigram index stays text-only.
-- Existing rows get an empty context until the index is rebuilt: the chunker
-- identity was bumped with this migration, so the next `claw memory index`
-- rebuilds it once.
ALTER TABLE chunks ADD COLUMN context TEXT NOT NULL DEFAULT '';

DROP TRIGGER IF EXISTS chunks_ai;
DROP TRIGGER IF EXISTS chunks_ad;
DROP TABLE IF EXISTS chunks_fts;

CREATE VIRTUAL TABLE chunks_fts USING fts5 (
    text,
    context,
    content = 'chunks',
    content_rowid = 'rowid',
    tokenize = 'porter unicode61 remove_diacritics 2'
);

CREATE TRIGGER chunks_ai AFTER INSERT ON chunks BEGIN
    INSERT INTO chunks_fts (rowid, text, context) VALUES (new.rowid, new.text, new.context);
    INSERT INTO chunks_trigram (rowid, text) VALUES (new.rowid, new.text);
END;

CREATE TRIGGER chunks_ad AFTER DELETE ON chunks BEGIN
    INSERT INTO chunks_fts (chunks_fts, rowid, text, context)
        VALUES ('delete', old.rowid, old.text, old.context);
    INSERT INTO chunks_trigram (chunks_trigram, rowid, text) VALUES ('delete', old.rowid, old.text);
END;

-- BM25 column weights (body, context), tuned on SciFact train (BENCHMARKS.md,
-- eval-scifact-kw-context{1,2,4}): 1/1 beat 1/2 and 1/4.
INSERT INTO chunks_fts (chunks_fts, rank) VALUES ('rank', 'bm25(1.0, 1.0)');
INSERT INTO chunks_fts (chunks_fts) VALUES ('rebuild');
