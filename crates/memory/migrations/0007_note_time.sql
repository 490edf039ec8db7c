-- claw memory store, schema version 7: dated chunks by their time. A query that
-- names a date ("on May 4th", "last week") takes the chunks dated inside its
-- window (`search::rows::dated_between`): without this index that is a scan of
-- every chunk. Partial: evergreen chunks (note_time NULL) are never asked for by
-- date, and a range on note_time implies it is not NULL, so the planner uses it.
CREATE INDEX chunks_by_note_time ON chunks (note_time) WHERE note_time IS NOT NULL;
