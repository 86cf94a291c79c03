-- The records table. Times are Unix nanoseconds (bigint) so that the times a
-- caller passes in params.Now round-trip exactly; read them in SQL with
-- to_timestamp(created_at_ns / 1e9). scope and key use the "C" collation:
-- byte order, the same order Go's string comparison gives (Admin.List).
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
    PRIMARY KEY (scope, key)
);

-- Sweep deletes completed records whose expires_at_ns has passed.
CREATE INDEX {{expires_index}} ON {{records}} (expires_at_ns) WHERE state = 'completed';

COMMENT ON TABLE {{records}} IS 'retrysafe idempotency records (github.com/retrysafe/retrysafe/store/postgres)';
COMMENT ON COLUMN {{records}}.header IS 'stored response headers, retrysafe binary encoding';
