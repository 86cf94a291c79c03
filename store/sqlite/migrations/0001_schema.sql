-- The records table.
--
-- {{table}} is replaced by the configured table name, quoted, and
-- {{prefix}} by the bare name (validated as an SQL identifier). Times are
-- integer Unix nanoseconds (UTC); expires_at is NULL while a record is
-- processing. Headers are BLOBs in internal/headercodec's binary encoding
-- (the column's TEXT affinity keeps a BLOB as it is), bodies BLOBs. route is
-- ClaimParams.Route, the route that handled the request (for operators).
--
-- abandoned is Record.Abandoned: 1 once the owner gave up without a result
-- (Extend with Abandon); a takeover and Complete set it back to 0.
-- checkpoint_name, checkpoint_data and checkpoint_at (integer Unix
-- nanoseconds) are Record.Checkpoint, all NULL while there is none; a
-- takeover and Complete keep them, replacing an expired completed record
-- clears them.
CREATE TABLE {{table}} (
    scope       TEXT    NOT NULL,
    idem_key    TEXT    NOT NULL,
    fingerprint TEXT    NOT NULL,
    state       TEXT    NOT NULL CHECK (state IN ('processing', 'completed')),
    token       TEXT    NOT NULL,
    attempt     INTEGER NOT NULL,
    created_at  INTEGER NOT NULL,
    updated_at  INTEGER NOT NULL,
    lease_until INTEGER NOT NULL,
    expires_at  INTEGER,
    status      INTEGER,
    headers     TEXT,
    body        BLOB,
    route       TEXT    NOT NULL DEFAULT '',
    abandoned   INTEGER NOT NULL DEFAULT 0,
    checkpoint_name TEXT,
    checkpoint_data BLOB,
    checkpoint_at   INTEGER,
    PRIMARY KEY (scope, idem_key)
);

-- Sweep finds expired completed records, and processing records whose
-- lease ran out more than SweepParams.ProcessingRetention ago (attempts
-- with an unknown outcome), through these partial indexes.
CREATE INDEX "{{prefix}}_expires_at" ON {{table}} (expires_at) WHERE state = 'completed';
CREATE INDEX "{{prefix}}_processing_lease" ON {{table}} (lease_until) WHERE state = 'processing';
