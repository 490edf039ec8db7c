-- claw memory on PostgreSQL: schema version 5, the dated-chunk index of SQLite's
-- schema 7. A query that names a date takes the chunks dated inside its window
-- (`dated_between`: `namespace = ANY(...)` and a note_time range); without this
-- index that is a scan of every chunk. Partial: evergreen chunks (note_time
-- NULL) are never asked for by date.
CREATE INDEX chunks_note_time ON chunks (namespace, note_time) WHERE note_time IS NOT NULL;
