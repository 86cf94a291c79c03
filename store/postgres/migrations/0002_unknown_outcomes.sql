-- Unknown outcomes and checkpoints (issue 30).
--
-- abandoned is Record.Abandoned: true once the owner gave up without a
-- result (Extend with Abandon); a takeover and Complete set it back to
-- false. checkpoint_name, checkpoint_data and checkpoint_at_ns are
-- Record.Checkpoint, all NULL while there is none: a takeover and Complete
-- keep them, replacing an expired completed record clears them.
ALTER TABLE {{records}}
    ADD COLUMN abandoned        boolean NOT NULL DEFAULT false,
    ADD COLUMN checkpoint_name  text,
    ADD COLUMN checkpoint_data  bytea,
    ADD COLUMN checkpoint_at_ns bigint;

-- The claim and batch functions take the takeover policy and the
-- extensions' abandon and checkpoint, and return the new columns:
-- functions.sql, which Migrate runs next, creates them anew. The old ones
-- go (CREATE OR REPLACE cannot change a function's result type, and an
-- old signature left in place would be an overload that skips the
-- policy).
DROP FUNCTION IF EXISTS {{claim_fn}}(text, text, text, text, bigint, bigint, text);
DROP FUNCTION IF EXISTS {{batch_fn}}(text[], text[], text[], text[], text[], bigint[], bigint[], integer[], bytea[], bytea[], text[], text, text[]);
