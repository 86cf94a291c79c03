-- Group commit: one statement, one transaction and one commit for the
-- Claims, Completes, Releases and Extends that concurrent callers of one
-- Store sent while the previous batch ran. Store runs
--   SELECT * FROM {{batch_fn}}(op[], scope[], key[], fingerprint[], token[], now_ns[], until_ns[],
--                              status[], header[], body[], payload[], channel)
-- with one array element per operation, and gets one row per operation:
-- out_ord is the operation's (1-based) position in the arrays, out_result
-- its outcome, and for a claim the record as it stands.
--
-- until_ns is the lease end of a claim or an extend and the expiry of a
-- completion; payload is the notification payload of a completion or a
-- release.
--
-- Outcomes:
--   claimed  the claim won (the record is the caller's new one)
--   blocked  the claim lost (the record is the one that blocked it)
--   done     the completion, release or extension took effect
--   lost     fenced: no processing record under the caller's token
--   alone    not decided here: the row is locked by another transaction
--            (say a CompleteTx not yet committed), or a concurrent claim
--            inserted it after this statement's snapshot. The caller runs
--            the operation alone, with the single statements of the
--            store (which wait for the lock, as they always did).
--
-- The keys of one call are distinct: Store sends a second operation on a
-- key already in the batch alone, after the batch (so that operations of
-- one key run one after another). The function is set-based, with no loop
-- over the operations: one read answers the blocked claims, then one
-- statement, on a new snapshot, decides the rest:
--
--   - A claim of a key absent from the snapshot inserts (INSERT ... ON
--     CONFLICT DO NOTHING, in key order); a conflict (a concurrent claim)
--     leaves it alone.
--   - A claim of a row that blocks it (see the claim function in 0003) is
--     answered with that row, a plain read: nothing written, no lock
--     taken. The function answers these first, in a read of its own, and
--     runs the statement below (on a new snapshot) only for the other
--     operations, so a batch of replays is one indexed read per key.
--   - A claim of a claimable row (expired completed record, expired lease
--     with the claimant's fingerprint) locks it with FOR UPDATE SKIP
--     LOCKED, which re-checks claimability on the latest version, and
--     takes it over; a row that is locked or no longer claimable leaves
--     it alone.
--   - A completion, release or extension locks the row only if it is
--     processing under the caller's token (again FOR UPDATE SKIP LOCKED,
--     re-checked on the latest version) and then writes it; it is lost
--     when the snapshot's row is absent or not the caller's, and alone
--     when the snapshot's row is the caller's but could not be locked.
--
-- So the batch never waits for a row lock that another transaction holds,
-- and one held row never stalls the batch. It waits only for a concurrent
-- insert (or an update of a row inserted after its snapshot) of a key it
-- inserts, and inserts in key order, so batches wait for each other in key
-- order. Should a deadlock still arise, PostgreSQL's detector ends one
-- batch with an ERROR, and every operation of that batch runs alone.
--
-- Each operation keeps the semantics of its single statement: a claim
-- reads first and writes nothing when it is blocked (see the claim
-- function in 0003); a takeover keeps created_at_ns and adds one to the
-- attempt, a replaced completed record starts afresh; Complete, Release and
-- Extend are fenced by the token and state = 'processing', and Complete and
-- Release notify only records whose notify flag is set.
CREATE FUNCTION {{batch_fn}}(
    p_op text[], p_scope text[], p_key text[], p_fingerprint text[], p_token text[],
    p_now bigint[], p_until bigint[], p_status integer[], p_header bytea[], p_body bytea[],
    p_payload text[], p_channel text)
RETURNS TABLE (
    out_ord integer, out_result text,
    out_scope text, out_key text, out_fingerprint text, out_state text, out_token text, out_attempt integer,
    out_created_at_ns bigint, out_updated_at_ns bigint, out_lease_until_ns bigint, out_expires_at_ns bigint,
    out_status integer, out_header bytea, out_body bytea)
LANGUAGE plpgsql VOLATILE AS $batch$
DECLARE
    answered integer[] := '{}';
BEGIN
    -- First the claims that their row blocks (replays, conflicts): a plain
    -- read, answered at once. A batch of replays ends here.
    FOR out_ord, out_scope, out_key, out_fingerprint, out_state, out_token, out_attempt, out_created_at_ns,
        out_updated_at_ns, out_lease_until_ns, out_expires_at_ns, out_status, out_header, out_body IN
        SELECT a.ord::integer, r.scope, r.key, r.fingerprint, r.state, r.token, r.attempt, r.created_at_ns,
               r.updated_at_ns, r.lease_until_ns, r.expires_at_ns, r.status, r.header, r.body
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
        SELECT a.op, a.scope, a.key, a.fingerprint, a.token, a.now, a.until, a.status, a.header, a.body, a.payload,
               a.ord::integer AS ord
        FROM unnest(p_op, p_scope, p_key, p_fingerprint, p_token, p_now, p_until, p_status, p_header, p_body, p_payload)
             WITH ORDINALITY AS a(op, scope, key, fingerprint, token, now, until, status, header, body, payload, ord)
        WHERE a.ord <> ALL (answered)
    ),
    -- The operations' rows as of this statement's snapshot.
    cur AS (
        SELECT u.ord, r.scope, r.key, r.fingerprint, r.state, r.token, r.attempt, r.created_at_ns, r.updated_at_ns,
               r.lease_until_ns, r.expires_at_ns, r.status, r.header, r.body,
               coalesce((r.state = 'completed' AND r.expires_at_ns <= u.now)
                     OR (r.state = 'processing' AND r.lease_until_ns <= u.now AND r.fingerprint = u.fingerprint), false) AS claimable
        FROM u JOIN {{records}} AS r ON r.scope = u.scope AND r.key = u.key
    ),
    ins AS (
        INSERT INTO {{records}} AS r (scope, key, fingerprint, state, token, attempt, created_at_ns, updated_at_ns, lease_until_ns)
        SELECT u.scope, u.key, u.fingerprint, 'processing', u.token, 1, u.now, u.now, u.until
        FROM u
        WHERE u.op = 'claim' AND NOT EXISTS (SELECT 1 FROM cur WHERE cur.ord = u.ord)
        ORDER BY u.scope COLLATE "C", u.key COLLATE "C"
        ON CONFLICT (scope, key) DO NOTHING
        RETURNING r.scope, r.key, r.fingerprint, r.state, r.token, r.attempt, r.created_at_ns, r.updated_at_ns,
                  r.lease_until_ns, r.expires_at_ns, r.status, r.header, r.body
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
                  r.lease_until_ns, r.expires_at_ns, r.status, r.header, r.body
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
               i.updated_at_ns, i.lease_until_ns, i.expires_at_ns, i.status, i.header, i.body
        FROM ins AS i JOIN u ON u.scope = i.scope AND u.key = i.key AND u.op = 'claim'
        UNION ALL
        SELECT k.ord, 'claimed', k.scope, k.key, k.fingerprint, k.state, k.token, k.attempt, k.created_at_ns,
               k.updated_at_ns, k.lease_until_ns, k.expires_at_ns, k.status, k.header, k.body
        FROM took AS k
        UNION ALL
        SELECT c.ord, 'blocked', c.scope, c.key, c.fingerprint, c.state, c.token, c.attempt, c.created_at_ns,
               c.updated_at_ns, c.lease_until_ns, c.expires_at_ns, c.status, c.header, c.body
        FROM cur AS c JOIN u ON u.ord = c.ord
        WHERE u.op = 'claim' AND NOT c.claimable
        UNION ALL
        -- Waiters are notified only for records someone subscribed to.
        SELECT f.ord, CASE WHEN f.notify THEN 'done' || pg_notify(p_channel, u.payload)::text ELSE 'done' END,
               NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL
        FROM (SELECT * FROM completed UNION ALL SELECT * FROM released UNION ALL SELECT * FROM extended) AS f
        JOIN u ON u.ord = f.ord
    )
    SELECT u.ord,
           coalesce(d.result, CASE
               WHEN u.op = 'claim' THEN 'alone'
               WHEN c.token = u.token AND c.state = 'processing' THEN 'alone'
               ELSE 'lost' END),
           d.scope, d.key, d.fingerprint, d.state, d.token, d.attempt, d.created_at_ns, d.updated_at_ns,
           d.lease_until_ns, d.expires_at_ns, d.status, d.header, d.body
    FROM u
    LEFT JOIN decided AS d ON d.ord = u.ord
    LEFT JOIN cur AS c ON c.ord = u.ord;
END
$batch$;
