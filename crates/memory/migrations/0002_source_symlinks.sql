-- claw memory store, schema version 2.
-- Per-source opt-in: index files whose symlinks resolve outside the source root
-- (`claw memory add DIR --follow-symlinks-outside`). Off by default: such links
-- are skipped with an issue, and `memory get` refuses them at read time.
ALTER TABLE sources ADD COLUMN follow_symlinks_outside INTEGER NOT NULL DEFAULT 0;
