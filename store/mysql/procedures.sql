-- The store's stored routine: the claim procedure. Migrate runs this file
-- with the last migration it applies (statements separated by a line
-- "-- ;"); a change to it ships with a new numbered migration.
-- {{records}} is the records table, {{claim_proc}} the procedure's name.
DROP PROCEDURE IF EXISTS {{claim_proc}}
-- ;
-- The claim: one CALL, one round trip, one result row:
--   claimed, fingerprint, state, token, attempt, created_at_ns,
--   updated_at_ns, lease_until_ns, expires_at_ns, status, header, body,
--   route, abandoned, checkpoint_name, checkpoint_data, checkpoint_at_ns
-- (scope and key are the caller's).
--
-- 1. A plain read (no lock, no transaction). A record that blocks the
--    claim (completed and unexpired, processing with a live lease, or
--    processing with an expired lease and another fingerprint, or one the
--    claim may not take over: p_no_takeover, or a p_takeover_token other
--    than its token) is returned
--    as it is: a replay or a conflict writes nothing and waits for no lock,
--    not even for a caller's uncommitted CompleteTx.
-- 2. Otherwise, in a READ COMMITTED transaction: INSERT ... ON DUPLICATE
--    KEY UPDATE with a no-op update. It inserts the caller's new record
--    when the key is absent; when a row is there (or a concurrent claimant
--    inserted one, which it waits for) it takes an exclusive lock on that
--    row instead of failing, without InnoDB's shared-then-exclusive lock
--    upgrade that makes concurrent plain INSERTs deadlock.
-- 3. A locking read (FOR UPDATE, the newest committed version; the lock is
--    already held) decides: the row carries the caller's token, so the
--    insert was the caller's (claimed); or the row may be claimed (an
--    expired completed record, or an expired lease with the caller's
--    fingerprint) and one UPDATE takes it over (claimed: a takeover keeps
--    created_at_ns and the checkpoint, clears abandoned and adds one to
--    attempt, a replaced completed record starts afresh, without a
--    checkpoint; either way the row gets the caller's route); or it
--    blocks the claim (returned, unchanged, with its own route).
-- 4. COMMIT, and only then the result row, so a claim is never reported
--    won unless its commit succeeded. Any error rolls the transaction back
--    and is passed on (RESIGNAL); the store retries a deadlock.
--
-- Nothing here reads a clock: p_now is the caller's params.Now.
CREATE PROCEDURE {{claim_proc}}(
    IN p_scope VARBINARY(1024), IN p_key VARBINARY(1024), IN p_fingerprint VARBINARY(1024),
    IN p_token VARBINARY(255), IN p_now BIGINT, IN p_lease_until BIGINT,
    IN p_route VARBINARY(1024), IN p_no_takeover BOOLEAN, IN p_takeover_token VARBINARY(255))
    MODIFIES SQL DATA
    SQL SECURITY INVOKER
    COMMENT 'retrysafe claim (github.com/retrysafe/retrysafe/store/mysql)'
BEGIN
    DECLARE v_found BOOLEAN DEFAULT TRUE;
    DECLARE v_claimed BOOLEAN DEFAULT FALSE;
    DECLARE v_fingerprint VARBINARY(1024);
    DECLARE v_state VARBINARY(16);
    DECLARE v_token VARBINARY(255);
    DECLARE v_attempt INT;
    DECLARE v_created, v_updated, v_lease, v_expires BIGINT;
    DECLARE v_status INT;
    DECLARE v_header MEDIUMBLOB;
    DECLARE v_body LONGBLOB;
    DECLARE v_route VARBINARY(1024);
    DECLARE v_abandoned BOOLEAN;
    DECLARE v_cp_name VARBINARY(64);
    DECLARE v_cp_data MEDIUMBLOB;
    DECLARE v_cp_at BIGINT;
    DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_found = FALSE;
    DECLARE EXIT HANDLER FOR SQLEXCEPTION
    BEGIN
        ROLLBACK;
        RESIGNAL;
    END;

    SELECT fingerprint, state, token, attempt, created_at_ns, updated_at_ns, lease_until_ns, expires_at_ns, status, header, body, route,
           abandoned, checkpoint_name, checkpoint_data, checkpoint_at_ns
      INTO v_fingerprint, v_state, v_token, v_attempt, v_created, v_updated, v_lease, v_expires, v_status, v_header, v_body, v_route,
           v_abandoned, v_cp_name, v_cp_data, v_cp_at
      FROM {{records}} WHERE scope = p_scope AND idem_key = p_key;

    IF NOT v_found OR COALESCE((v_state = 'completed' AND v_expires <= p_now)
            OR (v_state = 'processing' AND v_lease <= p_now AND v_fingerprint = p_fingerprint
                AND NOT p_no_takeover AND (p_takeover_token = '' OR v_token = p_takeover_token)), FALSE) THEN
        SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
        START TRANSACTION;
        INSERT INTO {{records}} (scope, idem_key, fingerprint, state, token, attempt, created_at_ns, updated_at_ns, lease_until_ns, route)
            VALUES (p_scope, p_key, p_fingerprint, 'processing', p_token, 1, p_now, p_now, p_lease_until, p_route)
            ON DUPLICATE KEY UPDATE scope = scope;
        SET v_found = TRUE;
        SELECT fingerprint, state, token, attempt, created_at_ns, updated_at_ns, lease_until_ns, expires_at_ns, status, header, body, route,
               abandoned, checkpoint_name, checkpoint_data, checkpoint_at_ns
          INTO v_fingerprint, v_state, v_token, v_attempt, v_created, v_updated, v_lease, v_expires, v_status, v_header, v_body, v_route,
               v_abandoned, v_cp_name, v_cp_data, v_cp_at
          FROM {{records}} WHERE scope = p_scope AND idem_key = p_key FOR UPDATE;
        IF NOT v_found THEN
            SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'retrysafe claim: the row vanished under its lock';
        END IF;
        IF v_token = p_token THEN
            SET v_claimed = TRUE;
        ELSEIF COALESCE((v_state = 'completed' AND v_expires <= p_now)
                OR (v_state = 'processing' AND v_lease <= p_now AND v_fingerprint = p_fingerprint
                AND NOT p_no_takeover AND (p_takeover_token = '' OR v_token = p_takeover_token)), FALSE) THEN
            IF v_state = 'processing' THEN
                SET v_attempt = v_attempt + 1;
            ELSE
                SET v_attempt = 1, v_created = p_now, v_cp_name = NULL, v_cp_data = NULL, v_cp_at = NULL;
            END IF;
            UPDATE {{records}} SET fingerprint = p_fingerprint, state = 'processing', token = p_token,
                    attempt = v_attempt, created_at_ns = v_created, updated_at_ns = p_now,
                    lease_until_ns = p_lease_until, expires_at_ns = NULL, status = NULL, header = NULL, body = NULL,
                    route = p_route, abandoned = FALSE,
                    checkpoint_name = v_cp_name, checkpoint_data = v_cp_data, checkpoint_at_ns = v_cp_at,
                    revision = revision + 1
                WHERE scope = p_scope AND idem_key = p_key;
            SET v_claimed = TRUE, v_fingerprint = p_fingerprint, v_state = 'processing', v_token = p_token,
                v_updated = p_now, v_lease = p_lease_until, v_expires = NULL, v_status = NULL, v_header = NULL, v_body = NULL, v_route = p_route,
                v_abandoned = FALSE;
        END IF;
        COMMIT;
    END IF;

    SELECT v_claimed, v_fingerprint, v_state, v_token, v_attempt, v_created, v_updated, v_lease, v_expires, v_status, v_header, v_body, v_route,
           v_abandoned, v_cp_name, v_cp_data, v_cp_at;
END
