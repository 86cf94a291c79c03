-- The records table. Every column that holds caller data is binary
-- (VARBINARY, BLOB): keys compare and sort byte by byte (Admin.List's
-- order), trailing spaces and case are significant, and no character set
-- conversion ever touches a key, a header or a body. Times are Unix
-- nanoseconds (BIGINT), so the times callers pass in params.Now come back
-- exactly; read them in SQL with FROM_UNIXTIME(created_at_ns DIV 1000000000).
--
-- route is ClaimParams.Route, the route that handled the request (for
-- operators; it decides nothing): a claim and a takeover set it, Complete
-- keeps it.
--
-- abandoned is Record.Abandoned: TRUE once the owner gave up without a
-- result (Extend with Abandon); a takeover and Complete set it back to
-- FALSE. checkpoint_name, checkpoint_data (up to MaxCheckpointData, 64
-- KiB: one byte more than a BLOB holds) and checkpoint_at_ns are
-- Record.Checkpoint, all NULL while there is none: a takeover and Complete
-- keep them, replacing an expired completed record clears them.
--
-- revision counts the changes of a row. Every fenced UPDATE increments it,
-- so a matched row is always a changed row and the affected-row count
-- means the same whether or not the connection sets CLIENT_FOUND_ROWS.
--
-- The two secondary indexes let Sweep find expired completed records and
-- abandoned processing records without a scan (MySQL has no partial
-- indexes: state leads instead).
--
-- The claim procedure is in ../procedures.sql, which Migrate runs after
-- this file.
CREATE TABLE IF NOT EXISTS {{records}} (
    scope          VARBINARY(1024) NOT NULL,
    idem_key       VARBINARY(1024) NOT NULL,
    fingerprint    VARBINARY(1024) NOT NULL,
    state          VARBINARY(16)   NOT NULL,
    token          VARBINARY(255)  NOT NULL,
    attempt        INT             NOT NULL,
    created_at_ns  BIGINT          NOT NULL,
    updated_at_ns  BIGINT          NOT NULL,
    lease_until_ns BIGINT          NOT NULL,
    expires_at_ns  BIGINT          NULL,
    status         INT             NULL,
    header         MEDIUMBLOB      NULL,
    body           LONGBLOB        NULL,
    route          VARBINARY(1024) NOT NULL DEFAULT '',
    revision       BIGINT UNSIGNED NOT NULL DEFAULT 0,
    abandoned        BOOLEAN       NOT NULL DEFAULT FALSE,
    checkpoint_name  VARBINARY(64) NULL,
    checkpoint_data  MEDIUMBLOB    NULL,
    checkpoint_at_ns BIGINT        NULL,
    PRIMARY KEY (scope, idem_key),
    KEY {{expires_index}} (state, expires_at_ns),
    KEY {{lease_index}} (state, lease_until_ns),
    CONSTRAINT {{state_check}} CHECK (state IN ('processing', 'completed'))
) ENGINE = InnoDB ROW_FORMAT = DYNAMIC
  COMMENT = 'retrysafe idempotency records (github.com/retrysafe/retrysafe/store/mysql)'
