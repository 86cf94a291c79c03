-- 0002: Sweep retires processing records whose lease ran out more than
-- SweepParams.ProcessingRetention ago (attempts with an unknown outcome);
-- it finds them through this partial index.
CREATE INDEX "{{prefix}}_processing_lease" ON {{table}} (lease_until) WHERE state = 'processing';
