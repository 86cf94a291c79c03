-- 0001: the records table.
--
-- {{table}} is replaced by the configured table name, quoted, and
-- {{prefix}} by the bare name (validated as an SQL identifier). Times are integer Unix nanoseconds (UTC); expires_at is NULL
-- while a record is processing. Headers are JSON, bodies BLOBs.
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
    PRIMARY KEY (scope, idem_key)
);

-- Sweep finds expired completed records through this partial index.
CREATE INDEX "{{prefix}}_expires_at" ON {{table}} (expires_at) WHERE state = 'completed';
