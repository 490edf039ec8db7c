-- claw memory on PostgreSQL: schema version 2, BM25 for the keyword stage.
-- (1) The word index tokenises like SQLite's FTS5 `unicode61`: every run of
-- letters and digits is a token (PostgreSQL's own parser keeps `covid-19` as
-- `covid` + `-19`, e-mails, URLs and decimals whole), lower-cased, no stemming.
-- (2) FTS5's bm25() needs, besides each term's frequency in a chunk (the
-- tsvector's positions), the chunk's length in tokens and the average length over
-- the index: `dl` is the first (a stored generated column, same tokenisation as
-- `tsv`), and `chunk_stats` keeps the chunk count and total length per
-- (namespace, workspace, source), maintained by statement triggers inside the
-- writing transaction (each source is written under its own advisory lock, so its
-- row is not contended by other writers).

-- The word tokens of `t` as a tsvector (the query side splits the same way).
CREATE FUNCTION claw_words(t text) RETURNS tsvector
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    AS $$ SELECT to_tsvector('simple', regexp_replace(t, '[^[:alnum:]]+', ' ', 'g')) $$;

-- How many tokens a tsvector was built from (the sum of its position counts).
CREATE FUNCTION claw_tsv_tokens(v tsvector) RETURNS integer
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    AS $$ SELECT coalesce(sum(coalesce(array_length(positions, 1), 1)), 0)::integer FROM unnest(v) $$;

DROP INDEX chunks_tsv;
ALTER TABLE chunks DROP COLUMN tsv;
ALTER TABLE chunks
    ADD COLUMN tsv tsvector GENERATED ALWAYS AS (claw_words(text)) STORED,
    ADD COLUMN dl integer GENERATED ALWAYS AS (claw_tsv_tokens(claw_words(text))) STORED;
CREATE INDEX chunks_tsv ON chunks USING gin (tsv);

CREATE TABLE chunk_stats (
    namespace TEXT NOT NULL,
    workspace TEXT NOT NULL,
    source    TEXT NOT NULL,
    n         BIGINT NOT NULL,
    total_dl  BIGINT NOT NULL,
    PRIMARY KEY (namespace, workspace, source)
);
INSERT INTO chunk_stats (namespace, workspace, source, n, total_dl)
    SELECT namespace, workspace, source, count(*), coalesce(sum(dl), 0)
    FROM chunks GROUP BY namespace, workspace, source;

-- One function for the three events (a trigger with transition tables has one event;
-- `INSERT … ON CONFLICT DO UPDATE` fires the UPDATE one for the rows it rewrites).
CREATE FUNCTION claw_chunk_stats_apply() RETURNS trigger
    LANGUAGE plpgsql SET search_path FROM CURRENT
    AS $$
BEGIN
    IF TG_OP IN ('DELETE', 'UPDATE') THEN
        UPDATE chunk_stats AS s SET n = s.n - o.n, total_dl = s.total_dl - o.total_dl
            FROM (SELECT namespace, workspace, source, count(*) AS n, coalesce(sum(dl), 0) AS total_dl
                  FROM claw_old_rows GROUP BY namespace, workspace, source) o
            WHERE s.namespace = o.namespace AND s.workspace = o.workspace AND s.source = o.source;
    END IF;
    IF TG_OP IN ('INSERT', 'UPDATE') THEN
        INSERT INTO chunk_stats AS s (namespace, workspace, source, n, total_dl)
            SELECT namespace, workspace, source, count(*), coalesce(sum(dl), 0)
            FROM claw_new_rows GROUP BY namespace, workspace, source
        ON CONFLICT (namespace, workspace, source) DO UPDATE
            SET n = s.n + EXCLUDED.n, total_dl = s.total_dl + EXCLUDED.total_dl;
    END IF;
    DELETE FROM chunk_stats WHERE n <= 0;
    RETURN NULL;
END $$;

CREATE TRIGGER chunk_stats_insert AFTER INSERT ON chunks
    REFERENCING NEW TABLE AS claw_new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION claw_chunk_stats_apply();
CREATE TRIGGER chunk_stats_update AFTER UPDATE ON chunks
    REFERENCING OLD TABLE AS claw_old_rows NEW TABLE AS claw_new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION claw_chunk_stats_apply();
CREATE TRIGGER chunk_stats_delete AFTER DELETE ON chunks
    REFERENCING OLD TABLE AS claw_old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION claw_chunk_stats_apply();
