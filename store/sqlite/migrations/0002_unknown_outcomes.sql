-- Unknown outcomes and checkpoints (issue 30).
--
-- abandoned is Record.Abandoned: 1 once the owner gave up without a result
-- (Extend with Abandon); a takeover and Complete set it back to 0.
-- checkpoint_name, checkpoint_data and checkpoint_at (integer Unix
-- nanoseconds) are Record.Checkpoint, all NULL while there is none; a
-- takeover and Complete keep them, replacing an expired completed record
-- clears them.
ALTER TABLE {{table}} ADD COLUMN abandoned INTEGER NOT NULL DEFAULT 0;
ALTER TABLE {{table}} ADD COLUMN checkpoint_name TEXT;
ALTER TABLE {{table}} ADD COLUMN checkpoint_data BLOB;
ALTER TABLE {{table}} ADD COLUMN checkpoint_at INTEGER;
