-- 0006: the route that handled each record's request (ClaimParams.Route),
-- for operators. The column is added with a constant default (no table
-- rewrite); rows written before it have the empty route. The claim and
-- batch functions gain a route argument (last) and return the route with
-- the record; everything else about them is as 0003 and 0005 explain. The
-- new versions are overloads: the old ones stay, so gateways of the previous
-- version keep working against a migrated schema during a rolling upgrade
-- (their records get the empty route).
ALTER TABLE {{records}} ADD COLUMN route text NOT NULL DEFAULT '';

CREATE FUNCTION {{claim_fn}}(
    p_scope text, p_key text, p_fingerprint text, p_token text, p_now bigint, p_lease_until bigint, p_route text)
RETURNS TABLE (
    out_scope text, out_key text, out_fingerprint text, out_state text, out_token text, out_attempt integer,
    out_created_at_ns bigint, out_updated_at_ns bigint, out_lease_until_ns bigint, out_expires_at_ns bigint,
    out_status integer, out_header bytea, out_body bytea, out_route text, out_claimed boolean)
LANGUAGE plpgsql VOLATILE AS $claim$
BEGIN
    RETURN QUERY
        SELECT r.scope, r.key, r.fingerprint, r.state, r.token, r.attempt, r.created_at_ns, r.updated_at_ns,
               r.lease_until_ns, r.expires_at_ns, r.status, r.header, r.body, r.route, false
        FROM {{records}} AS r
        WHERE r.scope = p_scope AND r.key = p_key
          AND NOT coalesce((r.state = 'completed' AND r.expires_at_ns <= p_now)
                        OR (r.state = 'processing' AND r.lease_until_ns <= p_now AND r.fingerprint = p_fingerprint), false);
    IF FOUND THEN
        RETURN;
    END IF;

    RETURN QUERY
        INSERT INTO {{records}} AS r (scope, key, fingerprint, state, token, attempt, created_at_ns, updated_at_ns, lease_until_ns, route)
        VALUES (p_scope, p_key, p_fingerprint, 'processing', p_token, 1, p_now, p_now, p_lease_until, p_route)
        ON CONFLICT (scope, key) DO UPDATE SET
            fingerprint    = CASE WHEN {{take}} THEN excluded.fingerprint ELSE r.fingerprint END,
            route          = CASE WHEN {{take}} THEN excluded.route ELSE r.route END,
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
                  r.lease_until_ns, r.expires_at_ns, r.status, r.header, r.body, r.route, r.token = p_token;
END
$claim$;

CREATE FUNCTION {{batch_fn}}(
    p_op text[], p_scope text[], p_key text[], p_fingerprint text[], p_token text[],
    p_now bigint[], p_until bigint[], p_status integer[], p_header bytea[], p_body bytea[],
    p_payload text[], p_channel text, p_route text[])
RETURNS TABLE (
    out_ord integer, out_result text,
    out_scope text, out_key text, out_fingerprint text, out_state text, out_token text, out_attempt integer,
    out_created_at_ns bigint, out_updated_at_ns bigint, out_lease_until_ns bigint, out_expires_at_ns bigint,
    out_status integer, out_header bytea, out_body bytea, out_route text)
LANGUAGE plpgsql VOLATILE AS $batch$
DECLARE
    answered integer[] := '{}';
BEGIN
    -- First the claims that their row blocks (replays, conflicts): a plain
    -- read, answered at once. A batch of replays ends here.
    FOR out_ord, out_scope, out_key, out_fingerprint, out_state, out_token, out_attempt, out_created_at_ns,
        out_updated_at_ns, out_lease_until_ns, out_expires_at_ns, out_status, out_header, out_body, out_route IN
        SELECT a.ord::integer, r.scope, r.key, r.fingerprint, r.state, r.token, r.attempt, r.created_at_ns,
               r.updated_at_ns, r.lease_until_ns, r.expires_at_ns, r.status, r.header, r.body, r.route
        FROM unnest(p_op, p_scope, p_key, p_now, p_fingerprint) WITH ORDINALITY AS a(op, scope, key, now, fingerprint, ord)
        JOIN {{records}} AS r ON r.scope = a.scope AND r.key = a.key
        WHERE a.op = 'claim'
          AND NOT coalesce((r.state = 'completed' AND r.expires_at_ns <= a.now)
                        OR (r.state = 'processing' AND r.lease_until_ns <= a.now AND r.fingerprint = a.fingerprint), false)
    LOOP
        out_result := 'blocked';
        answered := answered || out_ord;
        RETURN NEXT;
    END LOOP;
    IF cardinality(answered) = cardinality(p_op) THEN
        RETURN;
    END IF;

    -- Then everything else, in one statement on a new snapshot.
    RETURN QUERY
    WITH u AS (
        SELECT a.op, a.scope, a.key, a.fingerprint, a.token, a.now, a.until, a.status, a.header, a.body, a.payload, a.route,
               a.ord::integer AS ord
        FROM unnest(p_op, p_scope, p_key, p_fingerprint, p_token, p_now, p_until, p_status, p_header, p_body, p_payload, p_route)
             WITH ORDINALITY AS a(op, scope, key, fingerprint, token, now, until, status, header, body, payload, route, ord)
        WHERE a.ord <> ALL (answered)
    ),
    -- The operations' rows as of this statement's snapshot.
    cur AS (
        SELECT u.ord, r.scope, r.key, r.fingerprint, r.state, r.token, r.attempt, r.created_at_ns, r.updated_at_ns,
               r.lease_until_ns, r.expires_at_ns, r.status, r.header, r.body, r.route,
               coalesce((r.state = 'completed' AND r.expires_at_ns <= u.now)
                     OR (r.state = 'processing' AND r.lease_until_ns <= u.now AND r.fingerprint = u.fingerprint), false) AS claimable
        FROM u JOIN {{records}} AS r ON r.scope = u.scope AND r.key = u.key
    ),
    ins AS (
        INSERT INTO {{records}} AS r (scope, key, fingerprint, state, token, attempt, created_at_ns, updated_at_ns, lease_until_ns, route)
        SELECT u.scope, u.key, u.fingerprint, 'processing', u.token, 1, u.now, u.now, u.until, u.route
        FROM u
        WHERE u.op = 'claim' AND NOT EXISTS (SELECT 1 FROM cur WHERE cur.ord = u.ord)
        ORDER BY u.scope COLLATE "C", u.key COLLATE "C"
        ON CONFLICT (scope, key) DO NOTHING
        RETURNING r.scope, r.key, r.fingerprint, r.state, r.token, r.attempt, r.created_at_ns, r.updated_at_ns,
                  r.lease_until_ns, r.expires_at_ns, r.status, r.header, r.body, r.route
    ),
    take AS (
        SELECT u.ord, r.state AS old_state, r.attempt AS old_attempt, r.created_at_ns AS old_created_at_ns
        FROM u JOIN {{records}} AS r ON r.scope = u.scope AND r.key = u.key
        WHERE u.op = 'claim'
          AND coalesce((r.state = 'completed' AND r.expires_at_ns <= u.now)
                    OR (r.state = 'processing' AND r.lease_until_ns <= u.now AND r.fingerprint = u.fingerprint), false)
        FOR UPDATE OF r SKIP LOCKED
    ),
    took AS (
        UPDATE {{records}} AS r SET
            fingerprint    = u.fingerprint,
            route          = u.route,
            state          = 'processing',
            token          = u.token,
            attempt        = CASE WHEN k.old_state = 'processing' THEN k.old_attempt + 1 ELSE 1 END,
            created_at_ns  = CASE WHEN k.old_state = 'completed' THEN u.now ELSE k.old_created_at_ns END,
            updated_at_ns  = u.now,
            lease_until_ns = u.until,
            expires_at_ns  = NULL,
            status         = NULL,
            header         = NULL,
            body           = NULL
        FROM take AS k JOIN u ON u.ord = k.ord
        WHERE r.scope = u.scope AND r.key = u.key
        RETURNING k.ord, r.scope, r.key, r.fingerprint, r.state, r.token, r.attempt, r.created_at_ns, r.updated_at_ns,
                  r.lease_until_ns, r.expires_at_ns, r.status, r.header, r.body, r.route
    ),
    held AS (
        SELECT u.ord, r.notify
        FROM u JOIN {{records}} AS r ON r.scope = u.scope AND r.key = u.key
        WHERE u.op <> 'claim' AND r.token = u.token AND r.state = 'processing'
        FOR UPDATE OF r SKIP LOCKED
    ),
    completed AS (
        UPDATE {{records}} AS r SET state = 'completed', updated_at_ns = u.now, expires_at_ns = u.until,
            status = u.status, header = u.header, body = u.body
        FROM held AS h JOIN u ON u.ord = h.ord
        WHERE u.op = 'complete' AND r.scope = u.scope AND r.key = u.key
        RETURNING h.ord, h.notify
    ),
    released AS (
        DELETE FROM {{records}} AS r USING held AS h JOIN u ON u.ord = h.ord
        WHERE u.op = 'release' AND r.scope = u.scope AND r.key = u.key
        RETURNING h.ord, h.notify
    ),
    extended AS (
        UPDATE {{records}} AS r SET lease_until_ns = u.until, updated_at_ns = u.now
        FROM held AS h JOIN u ON u.ord = h.ord
        WHERE u.op = 'extend' AND r.scope = u.scope AND r.key = u.key
        RETURNING h.ord, false AS notify
    ),
    decided AS (
        SELECT u.ord, 'claimed' AS result, i.scope, i.key, i.fingerprint, i.state, i.token, i.attempt, i.created_at_ns,
               i.updated_at_ns, i.lease_until_ns, i.expires_at_ns, i.status, i.header, i.body, i.route
        FROM ins AS i JOIN u ON u.scope = i.scope AND u.key = i.key AND u.op = 'claim'
        UNION ALL
        SELECT k.ord, 'claimed', k.scope, k.key, k.fingerprint, k.state, k.token, k.attempt, k.created_at_ns,
               k.updated_at_ns, k.lease_until_ns, k.expires_at_ns, k.status, k.header, k.body, k.route
        FROM took AS k
        UNION ALL
        SELECT c.ord, 'blocked', c.scope, c.key, c.fingerprint, c.state, c.token, c.attempt, c.created_at_ns,
               c.updated_at_ns, c.lease_until_ns, c.expires_at_ns, c.status, c.header, c.body, c.route
        FROM cur AS c JOIN u ON u.ord = c.ord
        WHERE u.op = 'claim' AND NOT c.claimable
        UNION ALL
        -- Waiters are notified only for records someone subscribed to.
        SELECT f.ord, CASE WHEN f.notify THEN 'done' || pg_notify(p_channel, u.payload)::text ELSE 'done' END,
               NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL
        FROM (SELECT * FROM completed UNION ALL SELECT * FROM released UNION ALL SELECT * FROM extended) AS f
        JOIN u ON u.ord = f.ord
    )
    SELECT u.ord,
           coalesce(d.result, CASE
               WHEN u.op = 'claim' THEN 'alone'
               WHEN c.token = u.token AND c.state = 'processing' THEN 'alone'
               ELSE 'lost' END),
           d.scope, d.key, d.fingerprint, d.state, d.token, d.attempt, d.created_at_ns, d.updated_at_ns,
           d.lease_until_ns, d.expires_at_ns, d.status, d.header, d.body, d.route
    FROM u
    LEFT JOIN decided AS d ON d.ord = u.ord
    LEFT JOIN cur AS c ON c.ord = u.ord;
END
$batch$;
