-- The claim, as one function so that a call is one statement and one round
-- trip whatever state the key is in. Store.Claim runs
--   SELECT * FROM {{claim_fn}}(scope, key, fingerprint, token, now_ns, lease_until_ns)
-- and gets exactly one row: the record as it stands, plus claimed.
--
-- Step 1 reads the row. If it exists and may not be claimed (a completed
-- record that has not expired, a live lease, or an expired lease held under
-- another fingerprint) that row is the answer: a replay or a conflict is a
-- plain read that writes nothing and takes no lock. The answer is exact as of
-- the statement's snapshot, which is the claim's linearisation point.
--
-- Step 2 (absent or claimable in that snapshot) is INSERT ... ON CONFLICT DO
-- UPDATE. PostgreSQL then works on the latest committed version of the row
-- (READ COMMITTED), not on a snapshot, and locks it, so a row that a
-- concurrent claim inserted, took over or completed after step 1 is seen
-- here. The DO UPDATE has no WHERE clause, so RETURNING always yields the
-- row: when the locked row is still claimable every column is replaced (a
-- takeover), otherwise every column keeps its value (a no-op write that
-- exists only so that the current row comes back; it happens only when a
-- concurrent claimant won the race). The claim won when the returned token
-- is the caller's. A row deleted concurrently makes PostgreSQL retry the
-- insert itself. There is no loop here and no SERIALIZABLE transaction.
--
-- A takeover of an expired lease keeps created_at_ns and adds one to the
-- attempt; replacing an expired completed record starts afresh (attempt 1,
-- created now), as an absent key would. The notify flag is kept.
CREATE FUNCTION {{claim_fn}}(
    p_scope text, p_key text, p_fingerprint text, p_token text, p_now bigint, p_lease_until bigint)
RETURNS TABLE (
    out_scope text, out_key text, out_fingerprint text, out_state text, out_token text, out_attempt integer,
    out_created_at_ns bigint, out_updated_at_ns bigint, out_lease_until_ns bigint, out_expires_at_ns bigint,
    out_status integer, out_header bytea, out_body bytea, out_claimed boolean)
LANGUAGE plpgsql VOLATILE AS $claim$
BEGIN
    RETURN QUERY
        SELECT r.scope, r.key, r.fingerprint, r.state, r.token, r.attempt, r.created_at_ns, r.updated_at_ns,
               r.lease_until_ns, r.expires_at_ns, r.status, r.header, r.body, false
        FROM {{records}} AS r
        WHERE r.scope = p_scope AND r.key = p_key
          AND NOT coalesce((r.state = 'completed' AND r.expires_at_ns <= p_now)
                        OR (r.state = 'processing' AND r.lease_until_ns <= p_now AND r.fingerprint = p_fingerprint), false);
    IF FOUND THEN
        RETURN;
    END IF;

    RETURN QUERY
        INSERT INTO {{records}} AS r (scope, key, fingerprint, state, token, attempt, created_at_ns, updated_at_ns, lease_until_ns)
        VALUES (p_scope, p_key, p_fingerprint, 'processing', p_token, 1, p_now, p_now, p_lease_until)
        ON CONFLICT (scope, key) DO UPDATE SET
            fingerprint    = CASE WHEN {{take}} THEN excluded.fingerprint ELSE r.fingerprint END,
            state          = CASE WHEN {{take}} THEN 'processing' ELSE r.state END,
            token          = CASE WHEN {{take}} THEN excluded.token ELSE r.token END,
            attempt        = CASE WHEN NOT {{take}} THEN r.attempt WHEN r.state = 'processing' THEN r.attempt + 1 ELSE 1 END,
            created_at_ns  = CASE WHEN {{take}} AND r.state = 'completed' THEN excluded.created_at_ns ELSE r.created_at_ns END,
            updated_at_ns  = CASE WHEN {{take}} THEN excluded.updated_at_ns ELSE r.updated_at_ns END,
            lease_until_ns = CASE WHEN {{take}} THEN excluded.lease_until_ns ELSE r.lease_until_ns END,
            expires_at_ns  = CASE WHEN {{take}} THEN NULL ELSE r.expires_at_ns END,
            status         = CASE WHEN {{take}} THEN NULL ELSE r.status END,
            header         = CASE WHEN {{take}} THEN NULL ELSE r.header END,
            body           = CASE WHEN {{take}} THEN NULL ELSE r.body END
        RETURNING r.scope, r.key, r.fingerprint, r.state, r.token, r.attempt, r.created_at_ns, r.updated_at_ns,
                  r.lease_until_ns, r.expires_at_ns, r.status, r.header, r.body, r.token = p_token;
END
$claim$;
