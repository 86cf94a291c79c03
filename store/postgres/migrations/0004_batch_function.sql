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
-- The batch never waits for a row lock that another transaction holds
-- (FOR UPDATE SKIP LOCKED), so one held row never stalls the whole batch;
-- it only waits for a concurrent insert of the same key to end. Operations
-- are processed in (scope, key) order, and in their array order within one
-- key, so two batches lock rows in the same order (no deadlock between
-- batches) and operations of one key behave as if run one after another:
-- of two claims of an absent key the first wins and the second sees the
-- first's record. Each statement here takes a new snapshot (READ
-- COMMITTED, VOLATILE function) and sees what the earlier operations of
-- the batch wrote.
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
    i integer;
    r {{records}}%ROWTYPE;
    found_row boolean;
BEGIN
    FOR i IN
        SELECT u.ord::integer
        FROM unnest(p_scope, p_key) WITH ORDINALITY AS u(scope, key, ord)
        ORDER BY u.scope COLLATE "C", u.key COLLATE "C", u.ord
    LOOP
        IF p_op[i] = 'claim' THEN
            SELECT * INTO r FROM {{records}} AS t WHERE t.scope = p_scope[i] AND t.key = p_key[i];
            found_row := FOUND;
            IF found_row AND NOT coalesce((r.state = 'completed' AND r.expires_at_ns <= p_now[i])
                    OR (r.state = 'processing' AND r.lease_until_ns <= p_now[i] AND r.fingerprint = p_fingerprint[i]), false) THEN
                out_result := 'blocked';
            ELSIF found_row THEN
                -- Claimable in this snapshot: lock the latest version,
                -- without waiting, and decide on it.
                SELECT * INTO r FROM {{records}} AS t WHERE t.scope = p_scope[i] AND t.key = p_key[i]
                    FOR UPDATE SKIP LOCKED;
                IF NOT FOUND THEN
                    out_result := 'alone';
                ELSIF NOT coalesce((r.state = 'completed' AND r.expires_at_ns <= p_now[i])
                        OR (r.state = 'processing' AND r.lease_until_ns <= p_now[i] AND r.fingerprint = p_fingerprint[i]), false) THEN
                    out_result := 'blocked';
                ELSE
                    UPDATE {{records}} AS t SET
                        fingerprint    = p_fingerprint[i],
                        state          = 'processing',
                        token          = p_token[i],
                        attempt        = CASE WHEN r.state = 'processing' THEN r.attempt + 1 ELSE 1 END,
                        created_at_ns  = CASE WHEN r.state = 'completed' THEN p_now[i] ELSE r.created_at_ns END,
                        updated_at_ns  = p_now[i],
                        lease_until_ns = p_until[i],
                        expires_at_ns  = NULL,
                        status         = NULL,
                        header         = NULL,
                        body           = NULL
                    WHERE t.scope = p_scope[i] AND t.key = p_key[i]
                    RETURNING * INTO r;
                    out_result := 'claimed';
                END IF;
            ELSE
                INSERT INTO {{records}} AS t (scope, key, fingerprint, state, token, attempt, created_at_ns, updated_at_ns, lease_until_ns)
                VALUES (p_scope[i], p_key[i], p_fingerprint[i], 'processing', p_token[i], 1, p_now[i], p_now[i], p_until[i])
                ON CONFLICT (scope, key) DO NOTHING
                RETURNING * INTO r;
                IF FOUND THEN
                    out_result := 'claimed';
                ELSE
                    out_result := 'alone'; -- inserted concurrently, after this snapshot
                END IF;
            END IF;
        ELSE
            SELECT * INTO r FROM {{records}} AS t WHERE t.scope = p_scope[i] AND t.key = p_key[i]
                FOR UPDATE SKIP LOCKED;
            IF NOT FOUND THEN
                -- Absent, or locked by another transaction.
                PERFORM 1 FROM {{records}} AS t WHERE t.scope = p_scope[i] AND t.key = p_key[i];
                out_result := CASE WHEN FOUND THEN 'alone' ELSE 'lost' END;
            ELSIF r.state <> 'processing' OR r.token <> p_token[i] THEN
                out_result := 'lost';
            ELSIF p_op[i] = 'complete' THEN
                UPDATE {{records}} AS t SET state = 'completed', updated_at_ns = p_now[i], expires_at_ns = p_until[i],
                    status = p_status[i], header = p_header[i], body = p_body[i]
                WHERE t.scope = p_scope[i] AND t.key = p_key[i];
                IF r.notify THEN
                    PERFORM pg_notify(p_channel, p_payload[i]);
                END IF;
                out_result := 'done';
            ELSIF p_op[i] = 'release' THEN
                DELETE FROM {{records}} AS t WHERE t.scope = p_scope[i] AND t.key = p_key[i];
                IF r.notify THEN
                    PERFORM pg_notify(p_channel, p_payload[i]);
                END IF;
                out_result := 'done';
            ELSIF p_op[i] = 'extend' THEN
                UPDATE {{records}} AS t SET lease_until_ns = p_until[i], updated_at_ns = p_now[i]
                WHERE t.scope = p_scope[i] AND t.key = p_key[i];
                out_result := 'done';
            ELSE
                RAISE EXCEPTION 'retrysafe batch: unknown operation %', p_op[i];
            END IF;
            r := NULL; -- only claims return a record
        END IF;

        out_ord := i;
        out_scope := r.scope;
        out_key := r.key;
        out_fingerprint := r.fingerprint;
        out_state := r.state;
        out_token := r.token;
        out_attempt := r.attempt;
        out_created_at_ns := r.created_at_ns;
        out_updated_at_ns := r.updated_at_ns;
        out_lease_until_ns := r.lease_until_ns;
        out_expires_at_ns := r.expires_at_ns;
        out_status := r.status;
        out_header := r.header;
        out_body := r.body;
        RETURN NEXT;
    END LOOP;
END
$batch$;
