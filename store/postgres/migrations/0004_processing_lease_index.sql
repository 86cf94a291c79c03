-- Sweep retires processing records whose lease ran out more than
-- SweepParams.ProcessingRetention ago (attempts with an unknown outcome);
-- it finds them through this partial index, in lease order.
CREATE INDEX {{lease_index}} ON {{records}} (lease_until_ns) WHERE state = 'processing';
