-- Business schema of the payments example. Portable: the same text runs on
-- SQLite and PostgreSQL. Times are Unix milliseconds; no column is NULL.

CREATE TABLE IF NOT EXISTS orders (
    id         TEXT   PRIMARY KEY,
    amount     BIGINT NOT NULL CHECK (amount > 0),
    currency   TEXT   NOT NULL CHECK (length(currency) = 3),
    status     TEXT   NOT NULL CHECK (status IN ('open', 'paying', 'paid')),
    op_key     TEXT   NOT NULL UNIQUE,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL
);

CREATE TABLE IF NOT EXISTS payments (
    id           TEXT   PRIMARY KEY,
    order_id     TEXT   NOT NULL REFERENCES orders (id),
    op_key       TEXT   NOT NULL UNIQUE,
    provider_key TEXT   NOT NULL UNIQUE,
    amount       BIGINT NOT NULL CHECK (amount > 0),
    currency     TEXT   NOT NULL CHECK (length(currency) = 3),
    status       TEXT   NOT NULL CHECK (status IN ('pending', 'unknown', 'succeeded', 'failed', 'refunded')),
    charge_id    TEXT   NOT NULL DEFAULT '',
    failure      TEXT   NOT NULL DEFAULT '',
    refunded     BIGINT NOT NULL DEFAULT 0 CHECK (refunded >= 0 AND refunded <= amount),
    created_at   BIGINT NOT NULL,
    updated_at   BIGINT NOT NULL,
    CHECK (status <> 'refunded' OR refunded = amount),
    CHECK (status NOT IN ('succeeded', 'refunded') OR charge_id <> '')
);

-- At most one successful payment per order.
CREATE UNIQUE INDEX IF NOT EXISTS payments_one_success_per_order
    ON payments (order_id) WHERE status IN ('succeeded', 'refunded');

-- At most one payment in flight per order: a second operation (another key)
-- cannot charge the provider while the first one's outcome is open.
CREATE UNIQUE INDEX IF NOT EXISTS payments_one_in_flight_per_order
    ON payments (order_id) WHERE status IN ('pending', 'unknown');

CREATE INDEX IF NOT EXISTS payments_status ON payments (status, updated_at);

CREATE TABLE IF NOT EXISTS refunds (
    id         TEXT   PRIMARY KEY,
    payment_id TEXT   NOT NULL REFERENCES payments (id),
    op_key     TEXT   NOT NULL UNIQUE,
    amount     BIGINT NOT NULL CHECK (amount > 0),
    created_at BIGINT NOT NULL
);

-- Every status transition, written in the transaction that made it.
CREATE TABLE IF NOT EXISTS audit_log (
    id          TEXT   PRIMARY KEY,
    entity      TEXT   NOT NULL CHECK (entity IN ('order', 'payment')),
    entity_id   TEXT   NOT NULL,
    seq         BIGINT NOT NULL, -- 1, 2, … per entity: the order of its transitions
    from_status TEXT   NOT NULL,
    to_status   TEXT   NOT NULL,
    reason      TEXT   NOT NULL,
    at          BIGINT NOT NULL,
    UNIQUE (entity_id, seq)
);
