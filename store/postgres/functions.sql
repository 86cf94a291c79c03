-- The store's SQL functions: the claim and the group-commit batch. Migrate
-- runs this file (CREATE OR REPLACE, so it can run again) in the
-- transaction that applies the migrations, after them. A change to this
-- file ships with a new numbered migration, so that Migrate runs and
-- replaces the functions; TestFunctionsNeedAMigration holds the file's
-- hash per schema version to enforce that.
--
-- {{records}} is the records table, {{claim_fn}} and {{batch_fn}} the
-- functions' names (schema-qualified, quoted).
--
-- A record is claimable by a claim at time now with fingerprint fp when it
-- is completed and expired (expires_at_ns <= now), or processing with an
-- expired lease (lease_until_ns <= now) and the claimant's fingerprint,
-- and the claim allows that takeover: not no_takeover, and takeover_token
-- empty or the record's token (ClaimParams.NoTakeover, TakeoverToken).
-- Any other existing record blocks the claim and is its answer. Both
-- functions spell this condition out where they need it.

-- The claim, as one function so that a call is one statement and one round
-- trip whatever state the key is in. Store.Claim runs
--   SELECT * FROM {{claim_fn}}(scope, key, fingerprint, token, now_ns, lease_until_ns, route,
--                              no_takeover, takeover_token)
-- and gets exactly one row: the record as it stands, plus claimed.
--
-- Step 1 reads the row. If it exists and blocks the claim, that row is the
-- answer: a replay or a conflict is a plain read that writes nothing and
-- takes no lock. The answer is exact as of the statement's snapshot, which
-- is the claim's linearisation point.
--
-- Step 2 (absent or claimable in that snapshot) is INSERT ... ON CONFLICT DO
-- UPDATE. PostgreSQL then works on the latest committed version of the row
-- (READ COMMITTED), not on a snapshot, and locks it, so a row that a
-- concurrent claim inserted, took over or completed after step 1 is seen
-- here. Each CASE asks whether that locked row r may be taken by the claim
-- being inserted (excluded; its updated_at_ns is now). The DO UPDATE has no
-- WHERE clause, so RETURNING always yields the row: when the locked row is
-- still claimable every column is replaced (a takeover), otherwise every
-- column keeps its value (a no-op write that exists only so that the
-- current row comes back; it happens only when a concurrent claimant won
-- the race). The claim won when the returned token is the caller's. A row
-- deleted concurrently makes PostgreSQL retry the insert itself. There is
-- no loop here and no SERIALIZABLE transaction.
--
-- A takeover of an expired lease keeps created_at_ns and adds one to the
-- attempt; replacing an expired completed record starts afresh (attempt 1,
-- created now, no checkpoint), as an absent key would. A takeover keeps
-- the checkpoint, for the new owner to resume from, and clears abandoned.
-- Either way the record gets the claimant's route. The notify flag is kept.
CREATE OR REPLACE FUNCTION {{claim_fn}}(
    p_scope text, p_key text, p_fingerprint text, p_token text, p_now bigint, p_lease_until bigint, p_route text,
    p_no_takeover boolean, p_takeover_token text)
RETURNS TABLE (
    out_scope text, out_key text, out_fingerprint text, out_state text, out_token text, out_attempt integer,
    out_created_at_ns bigint, out_updated_at_ns bigint, out_lease_until_ns bigint, out_expires_at_ns bigint,
    out_status integer, out_header bytea, out_body bytea, out_route text,
    out_abandoned boolean, out_checkpoint_name text, out_checkpoint_data bytea, out_checkpoint_at_ns bigint,
    out_claimed boolean)
LANGUAGE plpgsql VOLATILE AS $claim$
BEGIN
    RETURN QUERY
        SELECT r.scope, r.key, r.fingerprint, r.state, r.token, r.attempt, r.created_at_ns, r.updated_at_ns,
               r.lease_until_ns, r.expires_at_ns, r.status, r.header, r.body, r.route,
               r.abandoned, r.checkpoint_name, r.checkpoint_data, r.checkpoint_at_ns, false
        FROM {{records}} AS r
        WHERE r.scope = p_scope AND r.key = p_key
          AND NOT coalesce((r.state = 'completed' AND r.expires_at_ns <= p_now)
                        OR (r.state = 'processing' AND r.lease_until_ns <= p_now AND r.fingerprint = p_fingerprint
                            AND NOT p_no_takeover AND (p_takeover_token = '' OR r.token = p_takeover_token)), false);
    IF FOUND THEN
        RETURN;
    END IF;

    RETURN QUERY
        INSERT INTO {{records}} AS r (scope, key, fingerprint, state, token, attempt, created_at_ns, updated_at_ns, lease_until_ns, route)
        VALUES (p_scope, p_key, p_fingerprint, 'processing', p_token, 1, p_now, p_now, p_lease_until, p_route)
        ON CONFLICT (scope, key) DO UPDATE SET
            fingerprint    = CASE WHEN ((r.state = 'completed' AND r.expires_at_ns <= excluded.updated_at_ns) OR (r.state = 'processing' AND r.lease_until_ns <= excluded.updated_at_ns AND r.fingerprint = excluded.fingerprint AND NOT p_no_takeover AND (p_takeover_token = '' OR r.token = p_takeover_token))) THEN excluded.fingerprint ELSE r.fingerprint END,
            route          = CASE WHEN ((r.state = 'completed' AND r.expires_at_ns <= excluded.updated_at_ns) OR (r.state = 'processing' AND r.lease_until_ns <= excluded.updated_at_ns AND r.fingerprint = excluded.fingerprint AND NOT p_no_takeover AND (p_takeover_token = '' OR r.token = p_takeover_token))) THEN excluded.route ELSE r.route END,
            state          = CASE WHEN ((r.state = 'completed' AND r.expires_at_ns <= excluded.updated_at_ns) OR (r.state = 'processing' AND r.lease_until_ns <= excluded.updated_at_ns AND r.fingerprint = excluded.fingerprint AND NOT p_no_takeover AND (p_takeover_token = '' OR r.token = p_takeover_token))) THEN 'processing' ELSE r.state END,
            token          = CASE WHEN ((r.state = 'completed' AND r.expires_at_ns <= excluded.updated_at_ns) OR (r.state = 'processing' AND r.lease_until_ns <= excluded.updated_at_ns AND r.fingerprint = excluded.fingerprint AND NOT p_no_takeover AND (p_takeover_token = '' OR r.token = p_takeover_token))) THEN excluded.token ELSE r.token END,
            attempt        = CASE WHEN NOT ((r.state = 'completed' AND r.expires_at_ns <= excluded.updated_at_ns) OR (r.state = 'processing' AND r.lease_until_ns <= excluded.updated_at_ns AND r.fingerprint = excluded.fingerprint AND NOT p_no_takeover AND (p_takeover_token = '' OR r.token = p_takeover_token))) THEN r.attempt WHEN r.state = 'processing' THEN r.attempt + 1 ELSE 1 END,
            created_at_ns  = CASE WHEN ((r.state = 'completed' AND r.expires_at_ns <= excluded.updated_at_ns) OR (r.state = 'processing' AND r.lease_until_ns <= excluded.updated_at_ns AND r.fingerprint = excluded.fingerprint AND NOT p_no_takeover AND (p_takeover_token = '' OR r.token = p_takeover_token))) AND r.state = 'completed' THEN excluded.created_at_ns ELSE r.created_at_ns END,
            updated_at_ns  = CASE WHEN ((r.state = 'completed' AND r.expires_at_ns <= excluded.updated_at_ns) OR (r.state = 'processing' AND r.lease_until_ns <= excluded.updated_at_ns AND r.fingerprint = excluded.fingerprint AND NOT p_no_takeover AND (p_takeover_token = '' OR r.token = p_takeover_token))) THEN excluded.updated_at_ns ELSE r.updated_at_ns END,
            lease_until_ns = CASE WHEN ((r.state = 'completed' AND r.expires_at_ns <= excluded.updated_at_ns) OR (r.state = 'processing' AND r.lease_until_ns <= excluded.updated_at_ns AND r.fingerprint = excluded.fingerprint AND NOT p_no_takeover AND (p_takeover_token = '' OR r.token = p_takeover_token))) THEN excluded.lease_until_ns ELSE r.lease_until_ns END,
            expires_at_ns  = CASE WHEN ((r.state = 'completed' AND r.expires_at_ns <= excluded.updated_at_ns) OR (r.state = 'processing' AND r.lease_until_ns <= excluded.updated_at_ns AND r.fingerprint = excluded.fingerprint AND NOT p_no_takeover AND (p_takeover_token = '' OR r.token = p_takeover_token))) THEN NULL ELSE r.expires_at_ns END,
            status         = CASE WHEN ((r.state = 'completed' AND r.expires_at_ns <= excluded.updated_at_ns) OR (r.state = 'processing' AND r.lease_until_ns <= excluded.updated_at_ns AND r.fingerprint = excluded.fingerprint AND NOT p_no_takeover AND (p_takeover_token = '' OR r.token = p_takeover_token))) THEN NULL ELSE r.status END,
            header         = CASE WHEN ((r.state = 'completed' AND r.expires_at_ns <= excluded.updated_at_ns) OR (r.state = 'processing' AND r.lease_until_ns <= excluded.updated_at_ns AND r.fingerprint = excluded.fingerprint AND NOT p_no_takeover AND (p_takeover_token = '' OR r.token = p_takeover_token))) THEN NULL ELSE r.header END,
            body           = CASE WHEN ((r.state = 'completed' AND r.expires_at_ns <= excluded.updated_at_ns) OR (r.state = 'processing' AND r.lease_until_ns <= excluded.updated_at_ns AND r.fingerprint = excluded.fingerprint AND NOT p_no_takeover AND (p_takeover_token = '' OR r.token = p_takeover_token))) THEN NULL ELSE r.body END,
            abandoned      = CASE WHEN ((r.state = 'completed' AND r.expires_at_ns <= excluded.updated_at_ns) OR (r.state = 'processing' AND r.lease_until_ns <= excluded.updated_at_ns AND r.fingerprint = excluded.fingerprint AND NOT p_no_takeover AND (p_takeover_token = '' OR r.token = p_takeover_token))) THEN false ELSE r.abandoned END,
            checkpoint_name  = CASE WHEN ((r.state = 'completed' AND r.expires_at_ns <= excluded.updated_at_ns) OR (r.state = 'processing' AND r.lease_until_ns <= excluded.updated_at_ns AND r.fingerprint = excluded.fingerprint AND NOT p_no_takeover AND (p_takeover_token = '' OR r.token = p_takeover_token))) AND r.state = 'completed' THEN NULL ELSE r.checkpoint_name END,
            checkpoint_data  = CASE WHEN ((r.state = 'completed' AND r.expires_at_ns <= excluded.updated_at_ns) OR (r.state = 'processing' AND r.lease_until_ns <= excluded.updated_at_ns AND r.fingerprint = excluded.fingerprint AND NOT p_no_takeover AND (p_takeover_token = '' OR r.token = p_takeover_token))) AND r.state = 'completed' THEN NULL ELSE r.checkpoint_data END,
            checkpoint_at_ns = CASE WHEN ((r.state = 'completed' AND r.expires_at_ns <= excluded.updated_at_ns) OR (r.state = 'processing' AND r.lease_until_ns <= excluded.updated_at_ns AND r.fingerprint = excluded.fingerprint AND NOT p_no_takeover AND (p_takeover_token = '' OR r.token = p_takeover_token))) AND r.state = 'completed' THEN NULL ELSE r.checkpoint_at_ns END
        RETURNING r.scope, r.key, r.fingerprint, r.state, r.token, r.attempt, r.created_at_ns, r.updated_at_ns,
                  r.lease_until_ns, r.expires_at_ns, r.status, r.header, r.body, r.route,
                  r.abandoned, r.checkpoint_name, r.checkpoint_data, r.checkpoint_at_ns, r.token = p_token;
END
$claim$;

-- Group commit: one statement, one transaction and one commit for the
-- Claims, Completes, Releases and Extends that concurrent callers of one
-- Store sent while the previous batch ran. Store runs
--   SELECT * FROM {{batch_fn}}(op[], scope[], key[], fingerprint[], token[], now_ns[], until_ns[],
--                              status[], header[], body[], payload[], channel, route[],
--                              no_takeover[], takeover_token[], abandon[], checkpoint_name[], checkpoint_data[])
-- with one array element per operation, and gets one row per operation:
-- out_ord is the operation's (1-based) position in the arrays, out_result
-- its outcome, and for a claim the record as it stands. until_ns is the
-- lease end of a claim or an extend and the expiry of a completion;
-- payload is the notification payload of a completion or a release;
-- no_takeover and takeover_token are a claim's takeover policy; abandon,
-- checkpoint_name (NULL: none) and checkpoint_data an extension's.
--
-- Outcomes:
--   claimed  the claim won (the record is the caller's new one)
--   blocked  the claim lost (the record is the one that blocked it)
--   done     the completion, release or extension took effect
--   lost     fenced: no processing record under the caller's token
--   alone    not decided here: the caller runs the operation alone, with
--            the claim function above or the store's single statements
--            (which wait for row locks).
--
-- The keys of one call are distinct: Store sends a second operation on a
-- key already in the batch alone, after the batch (so that operations of
-- one key run one after another). The function is set-based, with no loop
-- over the operations, and runs one small statement per kind of operation
-- the call holds, and only those (PostgreSQL runs every data-modifying CTE
-- of a statement even when it has no row to work on):
--
--   claims       one statement: a read of the claims' rows answers those
--                a row blocks (replays, conflicts: nothing written, no
--                lock taken), and one INSERT ... ON CONFLICT DO NOTHING,
--                in key order, inserts the claims of keys absent from the
--                snapshot. A claim that neither answered (a claimable row:
--                takeover of an expired record or lease; or a key a
--                concurrent claim inserted after the snapshot) is
--                answered "alone": its caller runs the claim function,
--                which decides every case under the row's lock. Takeovers
--                are rare (a key reused after its record expired, a lease
--                that ran out); they cost one more round trip, no more.
--   completions, releases, extensions: one statement each, which locks the
--                rows processing under the caller's token (FOR UPDATE SKIP
--                LOCKED, in key order), writes them, and answers the rest
--                lost (the snapshot has no such row) or alone (the row is
--                the caller's but another transaction holds it, say a
--                CompleteTx not yet committed).
--
-- Each statement takes a new snapshot; since the keys are distinct, no
-- statement sees another's row. So the batch never waits for a row lock
-- that another transaction holds, and one held row never stalls it. It
-- waits only for a concurrent insert of a key it inserts, and inserts in
-- key order, so batches wait for each other in key order. Should a
-- deadlock still arise, PostgreSQL's detector ends one batch with an
-- ERROR, and every operation of that batch runs alone. Complete and
-- Release notify only records whose notify flag is set.
CREATE OR REPLACE FUNCTION {{batch_fn}}(
    p_op text[], p_scope text[], p_key text[], p_fingerprint text[], p_token text[],
    p_now bigint[], p_until bigint[], p_status integer[], p_header bytea[], p_body bytea[],
    p_payload text[], p_channel text, p_route text[],
    p_no_takeover boolean[], p_takeover_token text[], p_abandon boolean[], p_checkpoint_name text[], p_checkpoint_data bytea[])
RETURNS TABLE (
    out_ord integer, out_result text,
    out_scope text, out_key text, out_fingerprint text, out_state text, out_token text, out_attempt integer,
    out_created_at_ns bigint, out_updated_at_ns bigint, out_lease_until_ns bigint, out_expires_at_ns bigint,
    out_status integer, out_header bytea, out_body bytea, out_route text,
    out_abandoned boolean, out_checkpoint_name text, out_checkpoint_data bytea, out_checkpoint_at_ns bigint)
LANGUAGE plpgsql VOLATILE AS $batch$
BEGIN
    IF 'claim' = ANY (p_op) THEN
        RETURN QUERY
        WITH a AS (
            SELECT a.scope, a.key, a.fingerprint, a.token, a.now, a.until, a.route, a.no_takeover, a.takeover_token,
                   a.ord::integer AS ord
            FROM unnest(p_op, p_scope, p_key, p_fingerprint, p_token, p_now, p_until, p_route, p_no_takeover, p_takeover_token)
                 WITH ORDINALITY AS a(op, scope, key, fingerprint, token, now, until, route, no_takeover, takeover_token, ord)
            WHERE a.op = 'claim'
        ),
        cur AS (
            SELECT a.ord, r.scope, r.key, r.fingerprint, r.state, r.token, r.attempt, r.created_at_ns, r.updated_at_ns,
                   r.lease_until_ns, r.expires_at_ns, r.status, r.header, r.body, r.route,
                   r.abandoned, r.checkpoint_name, r.checkpoint_data, r.checkpoint_at_ns,
                   NOT coalesce((r.state = 'completed' AND r.expires_at_ns <= a.now)
                             OR (r.state = 'processing' AND r.lease_until_ns <= a.now AND r.fingerprint = a.fingerprint
                                 AND NOT a.no_takeover AND (a.takeover_token = '' OR r.token = a.takeover_token)), false) AS blocks
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
                      r.lease_until_ns, r.expires_at_ns, r.status, r.header, r.body, r.route,
                      r.abandoned, r.checkpoint_name, r.checkpoint_data, r.checkpoint_at_ns
        )
        SELECT a.ord, CASE WHEN c.blocks THEN 'blocked' WHEN i.key IS NOT NULL THEN 'claimed' ELSE 'alone' END,
               coalesce(i.scope, c.scope), coalesce(i.key, c.key), coalesce(i.fingerprint, c.fingerprint),
               coalesce(i.state, c.state), coalesce(i.token, c.token), coalesce(i.attempt, c.attempt),
               coalesce(i.created_at_ns, c.created_at_ns), coalesce(i.updated_at_ns, c.updated_at_ns),
               coalesce(i.lease_until_ns, c.lease_until_ns), coalesce(i.expires_at_ns, c.expires_at_ns),
               coalesce(i.status, c.status), coalesce(i.header, c.header), coalesce(i.body, c.body), coalesce(i.route, c.route),
               coalesce(i.abandoned, c.abandoned), coalesce(i.checkpoint_name, c.checkpoint_name),
               coalesce(i.checkpoint_data, c.checkpoint_data), coalesce(i.checkpoint_at_ns, c.checkpoint_at_ns)
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
                status = u.status, header = u.header, body = u.body, abandoned = false
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
               NULL::bigint, NULL::bigint, NULL::bigint, NULL::bigint, NULL::integer, NULL::bytea, NULL::bytea, NULL::text,
               NULL::boolean, NULL::text, NULL::bytea, NULL::bigint
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
               NULL::bigint, NULL::bigint, NULL::bigint, NULL::bigint, NULL::integer, NULL::bytea, NULL::bytea, NULL::text,
               NULL::boolean, NULL::text, NULL::bytea, NULL::bigint
        FROM u LEFT JOIN done AS d ON d.ord = u.ord;
    END IF;

    IF 'extend' = ANY (p_op) THEN
        RETURN QUERY
        WITH u AS (
            SELECT a.scope, a.key, a.token, a.now, a.until, a.abandon, a.checkpoint_name, a.checkpoint_data, a.ord::integer AS ord
            FROM unnest(p_op, p_scope, p_key, p_token, p_now, p_until, p_abandon, p_checkpoint_name, p_checkpoint_data)
                 WITH ORDINALITY AS a(op, scope, key, token, now, until, abandon, checkpoint_name, checkpoint_data, ord)
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
            UPDATE {{records}} AS r SET lease_until_ns = CASE WHEN u.abandon THEN r.lease_until_ns ELSE u.until END,
                updated_at_ns = u.now, abandoned = r.abandoned OR u.abandon,
                checkpoint_name  = coalesce(u.checkpoint_name, r.checkpoint_name),
                checkpoint_data  = CASE WHEN u.checkpoint_name IS NULL THEN r.checkpoint_data ELSE u.checkpoint_data END,
                checkpoint_at_ns = CASE WHEN u.checkpoint_name IS NULL THEN r.checkpoint_at_ns ELSE u.now END
            FROM held AS h JOIN u ON u.ord = h.ord
            WHERE r.scope = u.scope AND r.key = u.key
            RETURNING h.ord
        )
        SELECT u.ord, CASE WHEN d.ord IS NULL THEN CASE WHEN EXISTS (SELECT 1 FROM {{records}} AS c
                                            WHERE c.scope = u.scope AND c.key = u.key AND c.token = u.token AND c.state = 'processing')
                                  THEN 'alone' ELSE 'lost' END ELSE 'done' END,
               NULL::text, NULL::text, NULL::text, NULL::text, NULL::text, NULL::integer,
               NULL::bigint, NULL::bigint, NULL::bigint, NULL::bigint, NULL::integer, NULL::bytea, NULL::bytea, NULL::text,
               NULL::boolean, NULL::text, NULL::bytea, NULL::bigint
        FROM u LEFT JOIN done AS d ON d.ord = u.ord;
    END IF;
END
$batch$;
