-- claw memory on PostgreSQL: schema version 3, the word index of SQLite's schema 4.
-- The word tokens are no longer PostgreSQL's view of `chunks.text`: claw makes them
-- in Rust (`claw_memory::words::index_words`: stems behind the chunk's context) and
-- the insert turns them into `tsv` and `dl` with `claw_words` (0002), the same
-- text SQLite's FTS5 word index receives, so both backends still rank with the same
-- BM25 by construction. `context` is where the chunk is (file title › heading path).
-- The index identity changed with this (`chunker_version`), so each namespace's
-- chunks are rebuilt once by its next index run; until then its old rows keep
-- their old tokens.
ALTER TABLE chunks ADD COLUMN context TEXT NOT NULL DEFAULT '';
ALTER TABLE chunks ALTER COLUMN tsv DROP EXPRESSION;
ALTER TABLE chunks ALTER COLUMN dl DROP EXPRESSION;
