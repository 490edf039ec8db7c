-- claw memory on PostgreSQL: schema version 6, the word postings (issue 30).
-- BM25 needs, for each query word, the chunks holding it with the word's count and
-- the chunk's length. Read from `chunks` (the GIN index names the rows, then each
-- row's tsvector is read from the heap), that is one heap page per candidate: at
-- 100,000 chunks a three-word query visits ~2,400 rows, most of a hybrid search's
-- time. `chunk_postings` holds the same facts one row per (chunk, word), and its
-- btree (`chunk_postings_word`) carries every column the word stage reads, so the
-- stage is an index-only scan of a few contiguous leaf pages.
--
-- Kept by statement triggers on `chunks` in the writing transaction (as
-- `chunk_stats`): a row's postings are its tsvector's lexemes, exactly. Phrase
-- terms (several tokens) still match against `chunks.tsv` (positions).

CREATE TABLE chunk_postings (
    lexeme    TEXT NOT NULL,
    namespace TEXT NOT NULL,
    rowid     BIGINT NOT NULL,
    -- The word's count in the chunk (its positions in the tsvector).
    tf        INTEGER NOT NULL,
    -- The chunk's length in tokens (`chunks.dl`).
    dl        INTEGER NOT NULL,
    source    TEXT NOT NULL
);

CREATE FUNCTION claw_chunk_postings_apply() RETURNS trigger
    LANGUAGE plpgsql SET search_path FROM CURRENT
    AS $$
BEGIN
    IF TG_OP IN ('DELETE', 'UPDATE') THEN
        DELETE FROM chunk_postings AS p USING claw_old_rows o WHERE p.rowid = o.rowid;
    END IF;
    IF TG_OP IN ('INSERT', 'UPDATE') THEN
        INSERT INTO chunk_postings (lexeme, namespace, rowid, tf, dl, source)
            SELECT u.lexeme, n.namespace, n.rowid, coalesce(array_length(u.positions, 1), 1),
                   coalesce(n.dl, 0), n.source
            FROM claw_new_rows n, unnest(n.tsv) u;
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER chunk_postings_insert AFTER INSERT ON chunks
    REFERENCING NEW TABLE AS claw_new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION claw_chunk_postings_apply();
CREATE TRIGGER chunk_postings_update AFTER UPDATE ON chunks
    REFERENCING OLD TABLE AS claw_old_rows NEW TABLE AS claw_new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION claw_chunk_postings_apply();
CREATE TRIGGER chunk_postings_delete AFTER DELETE ON chunks
    REFERENCING OLD TABLE AS claw_old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION claw_chunk_postings_apply();

INSERT INTO chunk_postings (lexeme, namespace, rowid, tf, dl, source)
    SELECT u.lexeme, c.namespace, c.rowid, coalesce(array_length(u.positions, 1), 1),
           coalesce(c.dl, 0), c.source
    FROM chunks c, unnest(c.tsv) u;

-- The word stage's scan (every column it reads: index-only) and the triggers' delete.
CREATE INDEX chunk_postings_word ON chunk_postings (lexeme, namespace, rowid) INCLUDE (tf, dl, source);
CREATE INDEX chunk_postings_rowid ON chunk_postings (rowid);
