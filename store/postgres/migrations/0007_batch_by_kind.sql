-- 0007: a cheaper batch function. Same signature, arguments, outcomes and
-- guarantees as the version of 0006 (see 0005 for the contract), replaced
-- in place, so a gateway of the previous version calling it during a
-- rolling upgrade gets exactly the answers it expects.
--
-- The version of 0005/0006 ran one statement of eleven CTEs for every
-- batch: PostgreSQL executes each data-modifying CTE (and the joins that
-- feed it) even when it has no row to work on, so a batch of new keys paid
-- for the takeover, completion, release and extension paths as well, about
-- four times the cost of the INSERT itself. This version runs one small
-- statement per kind of operation the batch holds, and only those:
--
--   claims       one statement: a read of the claims' rows answers those
--                a row blocks (replays, conflicts: nothing written, no
--                lock taken), and one INSERT ... ON CONFLICT DO NOTHING,
--                in key order, inserts the claims of keys absent from the
--                snapshot. A claim that neither answered (a claimable row:
--                takeover of an expired record or lease; or a key a
--                concurrent claim inserted after the snapshot) is
--                answered "alone": its caller runs the claim function of
--                0003, which decides every case under the row's lock.
--                Takeovers are rare (a key reused after its record
--                expired, a lease that ran out); they cost one more round
--                trip, no more.
--   completions, releases, extensions: one statement each, which locks the
--                rows processing under the caller's token (FOR UPDATE SKIP
--                LOCKED, in key order), writes them, and answers the rest
--                lost (the snapshot has no such row) or alone (the row is
--                the caller's but another transaction holds it).
--
-- Each statement takes a new snapshot; the keys of one call are distinct
-- (see 0005), so no statement sees another's row. The batch still never
-- waits for a row lock another transaction holds, except for a concurrent
-- insert of a key it inserts (in key order, as before).
CREATE OR REPLACE FUNCTION {{batch_fn}}(
    p_op text[], p_scope text[], p_key text[], p_fingerprint text[], p_token text[],
    p_now bigint[], p_until bigint[], p_status integer[], p_header bytea[], p_body bytea[],
    p_payload text[], p_channel text, p_route text[])
RETURNS TABLE (
    out_ord integer, out_result text,
    out_scope text, out_key text, out_fingerprint text, out_state text, out_token text, out_attempt integer,
    out_created_at_ns bigint, out_updated_at_ns bigint, out_lease_until_ns bigint, out_expires_at_ns bigint,
    out_status integer, out_header bytea, out_body bytea, out_route text)
LANGUAGE plpgsql VOLATILE AS $batch$
BEGIN
    IF 'claim' = ANY (p_op) THEN
        RETURN QUERY
        WITH a AS (
            SELECT a.scope, a.key, a.fingerprint, a.token, a.now, a.until, a.route, a.ord::integer AS ord
            FROM unnest(p_op, p_scope, p_key, p_fingerprint, p_token, p_now, p_until, p_route)
                 WITH ORDINALITY AS a(op, scope, key, fingerprint, token, now, until, route, ord)
            WHERE a.op = 'claim'
        ),
        cur AS (
            SELECT a.ord, r.scope, r.key, r.fingerprint, r.state, r.token, r.attempt, r.created_at_ns, r.updated_at_ns,
                   r.lease_until_ns, r.expires_at_ns, r.status, r.header, r.body, r.route,
                   NOT coalesce((r.state = 'completed' AND r.expires_at_ns <= a.now)
                             OR (r.state = 'processing' AND r.lease_until_ns <= a.now AND r.fingerprint = a.fingerprint), false) AS blocks
            FROM a JOIN {{records}} AS r ON r.scope = a.scope AND r.key = a.key
        ),
        ins AS (
            INSERT INTO {{records}} AS r (scope, key, fingerprint, state, token, attempt, created_at_ns, updated_at_ns, lease_until_ns, route)
            SELECT a.scope, a.key, a.fingerprint, 'processing', a.token, 1, a.now, a.now, a.until, a.route
            FROM a
            WHERE NOT EXISTS (SELECT 1 FROM cur WHERE cur.ord = a.ord)
            ORDER BY a.scope COLLATE "C", a.key COLLATE "C"
            ON CONFLICT (scope, key) DO NOTHING
            RETURNING r.scope, r.key, r.fingerprint, r.state, r.token, r.attempt, r.created_at_ns, r.updated_at_ns,
                      r.lease_until_ns, r.expires_at_ns, r.status, r.header, r.body, r.route
        )
        SELECT a.ord, CASE WHEN c.blocks THEN 'blocked' WHEN i.key IS NOT NULL THEN 'claimed' ELSE 'alone' END,
               coalesce(i.scope, c.scope), coalesce(i.key, c.key), coalesce(i.fingerprint, c.fingerprint),
               coalesce(i.state, c.state), coalesce(i.token, c.token), coalesce(i.attempt, c.attempt),
               coalesce(i.created_at_ns, c.created_at_ns), coalesce(i.updated_at_ns, c.updated_at_ns),
               coalesce(i.lease_until_ns, c.lease_until_ns), coalesce(i.expires_at_ns, c.expires_at_ns),
               coalesce(i.status, c.status), coalesce(i.header, c.header), coalesce(i.body, c.body), coalesce(i.route, c.route)
        FROM a
        LEFT JOIN cur AS c ON c.ord = a.ord
        LEFT JOIN ins AS i ON i.scope = a.scope AND i.key = a.key;
    END IF;

    IF 'complete' = ANY (p_op) THEN
        RETURN QUERY
        WITH u AS (
            SELECT a.scope, a.key, a.token, a.now, a.until, a.status, a.header, a.body, a.payload, a.ord::integer AS ord
            FROM unnest(p_op, p_scope, p_key, p_token, p_now, p_until, p_status, p_header, p_body, p_payload)
                 WITH ORDINALITY AS a(op, scope, key, token, now, until, status, header, body, payload, ord)
            WHERE a.op = 'complete'
        ),
        held AS (
            SELECT u.ord, r.notify
            FROM u JOIN {{records}} AS r ON r.scope = u.scope AND r.key = u.key
            WHERE r.token = u.token AND r.state = 'processing'
            ORDER BY r.scope COLLATE "C", r.key COLLATE "C"
            FOR UPDATE OF r SKIP LOCKED
        ),
        done AS (
            UPDATE {{records}} AS r SET state = 'completed', updated_at_ns = u.now, expires_at_ns = u.until,
                status = u.status, header = u.header, body = u.body
            FROM held AS h JOIN u ON u.ord = h.ord
            WHERE r.scope = u.scope AND r.key = u.key
            RETURNING h.ord, h.notify
        )
        SELECT u.ord,
               CASE WHEN d.ord IS NULL THEN CASE WHEN EXISTS (SELECT 1 FROM {{records}} AS c
                                            WHERE c.scope = u.scope AND c.key = u.key AND c.token = u.token AND c.state = 'processing')
                                  THEN 'alone' ELSE 'lost' END
                    WHEN d.notify THEN 'done' || pg_notify(p_channel, u.payload)::text
                    ELSE 'done' END,
               NULL::text, NULL::text, NULL::text, NULL::text, NULL::text, NULL::integer,
               NULL::bigint, NULL::bigint, NULL::bigint, NULL::bigint, NULL::integer, NULL::bytea, NULL::bytea, NULL::text
        FROM u LEFT JOIN done AS d ON d.ord = u.ord;
    END IF;

    IF 'release' = ANY (p_op) THEN
        RETURN QUERY
        WITH u AS (
            SELECT a.scope, a.key, a.token, a.payload, a.ord::integer AS ord
            FROM unnest(p_op, p_scope, p_key, p_token, p_payload) WITH ORDINALITY AS a(op, scope, key, token, payload, ord)
            WHERE a.op = 'release'
        ),
        held AS (
            SELECT u.ord, r.notify
            FROM u JOIN {{records}} AS r ON r.scope = u.scope AND r.key = u.key
            WHERE r.token = u.token AND r.state = 'processing'
            ORDER BY r.scope COLLATE "C", r.key COLLATE "C"
            FOR UPDATE OF r SKIP LOCKED
        ),
        done AS (
            DELETE FROM {{records}} AS r USING held AS h JOIN u ON u.ord = h.ord
            WHERE r.scope = u.scope AND r.key = u.key
            RETURNING h.ord, h.notify
        )
        SELECT u.ord,
               CASE WHEN d.ord IS NULL THEN CASE WHEN EXISTS (SELECT 1 FROM {{records}} AS c
                                            WHERE c.scope = u.scope AND c.key = u.key AND c.token = u.token AND c.state = 'processing')
                                  THEN 'alone' ELSE 'lost' END
                    WHEN d.notify THEN 'done' || pg_notify(p_channel, u.payload)::text
                    ELSE 'done' END,
               NULL::text, NULL::text, NULL::text, NULL::text, NULL::text, NULL::integer,
               NULL::bigint, NULL::bigint, NULL::bigint, NULL::bigint, NULL::integer, NULL::bytea, NULL::bytea, NULL::text
        FROM u LEFT JOIN done AS d ON d.ord = u.ord;
    END IF;

    IF 'extend' = ANY (p_op) THEN
        RETURN QUERY
        WITH u AS (
            SELECT a.scope, a.key, a.token, a.now, a.until, a.ord::integer AS ord
            FROM unnest(p_op, p_scope, p_key, p_token, p_now, p_until) WITH ORDINALITY AS a(op, scope, key, token, now, until, ord)
            WHERE a.op = 'extend'
        ),
        held AS (
            SELECT u.ord
            FROM u JOIN {{records}} AS r ON r.scope = u.scope AND r.key = u.key
            WHERE r.token = u.token AND r.state = 'processing'
            ORDER BY r.scope COLLATE "C", r.key COLLATE "C"
            FOR UPDATE OF r SKIP LOCKED
        ),
        done AS (
            UPDATE {{records}} AS r SET lease_until_ns = u.until, updated_at_ns = u.now
            FROM held AS h JOIN u ON u.ord = h.ord
            WHERE r.scope = u.scope AND r.key = u.key
            RETURNING h.ord
        )
        SELECT u.ord, CASE WHEN d.ord IS NULL THEN CASE WHEN EXISTS (SELECT 1 FROM {{records}} AS c
                                            WHERE c.scope = u.scope AND c.key = u.key AND c.token = u.token AND c.state = 'processing')
                                  THEN 'alone' ELSE 'lost' END ELSE 'done' END,
               NULL::text, NULL::text, NULL::text, NULL::text, NULL::text, NULL::integer,
               NULL::bigint, NULL::bigint, NULL::bigint, NULL::bigint, NULL::integer, NULL::bytea, NULL::bytea, NULL::text
        FROM u LEFT JOIN done AS d ON d.ord = u.ord;
    END IF;
END
$batch$;
