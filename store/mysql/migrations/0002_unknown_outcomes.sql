-- Unknown outcomes and checkpoints (issue 30).
--
-- abandoned is Record.Abandoned: TRUE once the owner gave up without a
-- result (Extend with Abandon); a takeover and Complete set it back to
-- FALSE. checkpoint_name, checkpoint_data (up to MaxCheckpointData, 64
-- KiB: one byte more than a BLOB holds) and checkpoint_at_ns are
-- Record.Checkpoint, all NULL while there is none: a takeover and Complete
-- keep them, replacing an expired completed record clears them.
--
-- One ALTER TABLE, so the columns come together. Should a Migrate die
-- after it and before recording the version, the next one finds the
-- columns there and goes on (Migrate takes a duplicate column as done).
ALTER TABLE {{records}}
    ADD COLUMN abandoned        BOOLEAN        NOT NULL DEFAULT FALSE,
    ADD COLUMN checkpoint_name  VARBINARY(64)  NULL,
    ADD COLUMN checkpoint_data  MEDIUMBLOB     NULL,
    ADD COLUMN checkpoint_at_ns BIGINT         NULL
