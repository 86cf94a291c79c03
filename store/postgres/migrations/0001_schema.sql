-- The records table. Times are Unix nanoseconds (bigint) so that the times a
-- caller passes in params.Now round-trip exactly; read them in SQL with
-- to_timestamp(created_at_ns / 1e9). scope and key use the "C" collation:
-- byte order, the same order Go's string comparison gives (Admin.List).
--
-- notify is set by Subscribe on a processing record that someone waits for.
-- Complete, Release and Delete call pg_notify only for such records: a
-- transaction that sends NOTIFY holds a database-wide lock through its
-- commit (WAL flush included), which would serialise every completion.
--
-- route is ClaimParams.Route, the route that handled the request (for
-- operators; it decides nothing).
--
-- abandoned is Record.Abandoned: true once the owner gave up without a
-- result (Extend with Abandon); a takeover and Complete set it back to
-- false. checkpoint_name, checkpoint_data and checkpoint_at_ns are
-- Record.Checkpoint, all NULL while there is none: a takeover and Complete
-- keep them, replacing an expired completed record clears them.
--
-- The claim and batch functions are in ../functions.sql, which Migrate
-- runs after the migrations.
CREATE TABLE {{records}} (
    scope          text COLLATE "C" NOT NULL,
    key            text COLLATE "C" NOT NULL,
    fingerprint    text    NOT NULL,
    state          text    NOT NULL CHECK (state IN ('processing', 'completed')),
    token          text    NOT NULL,
    attempt        integer NOT NULL,
    created_at_ns  bigint  NOT NULL,
    updated_at_ns  bigint  NOT NULL,
    lease_until_ns bigint,
    expires_at_ns  bigint,
    status         integer,
    header         bytea,
    body           bytea,
    notify         boolean NOT NULL DEFAULT false,
    route          text    NOT NULL DEFAULT '',
    abandoned        boolean NOT NULL DEFAULT false,
    checkpoint_name  text,
    checkpoint_data  bytea,
    checkpoint_at_ns bigint,
    PRIMARY KEY (scope, key)
);

-- Sweep deletes completed records whose expires_at_ns has passed, and
-- retires processing records whose lease ran out more than
-- SweepParams.ProcessingRetention ago (attempts with an unknown outcome),
-- in expiry and lease order, through these partial indexes.
CREATE INDEX {{expires_index}} ON {{records}} (expires_at_ns) WHERE state = 'completed';
CREATE INDEX {{lease_index}} ON {{records}} (lease_until_ns) WHERE state = 'processing';

COMMENT ON TABLE {{records}} IS 'retrysafe idempotency records (github.com/retrysafe/retrysafe/store/postgres)';
COMMENT ON COLUMN {{records}}.header IS 'stored response headers, retrysafe binary encoding';
