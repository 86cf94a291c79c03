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
-- ;
DROP PROCEDURE IF EXISTS {{batch_proc}}
-- ;
-- The batch: the Claims, Completes, Releases and Extends of concurrent
-- callers, at most one per key, in one READ COMMITTED transaction, one
-- COMMIT, one round trip (store/mysql/batch.go). p_ops is a JSON array
-- with one array per operation:
--   [kind, scope, key, fingerprint, token, now, until, route, status,
--    header, body, abandon, checkpoint name, checkpoint data]
-- kind is "c" (claim), "d" (complete), "r" (release) or "e" (extend);
-- every byte string is base64 (JSON text holds no arbitrary bytes), a
-- NULL is JSON null; until is a claim's or an extension's lease end, a
-- completion's expiry. Fields an operation does not use are null.
--
-- The result is one row, one column: a string with one letter per
-- operation, in order:
--   c  claimed: a claim of an absent key inserted the caller's record;
--   d  done: the fenced operation matched the owner's processing record;
--   l  lost: it matched none (ErrLeaseLost);
--   a  alone: the batch did not decide (a claim of a key that has a
--      record, which the claim procedure decides; a row another
--      transaction holds locked, which the batch does not wait for).
-- or the single letter "A": the batch failed and was rolled back whole,
-- nothing of it took effect, and every operation is to run alone (so
-- that one that fails fails alone).
--
-- Each operation first takes its row's lock with a locking read (FOR
-- UPDATE; READ COMMITTED takes no gap lock on an absent key). The batch
-- runs with the session's innodb_lock_wait_timeout at its minimum (0 on
-- MariaDB: no wait; MySQL 8 raises it to 1 second) and puts it back
-- before COMMIT: a row another transaction holds leaves the operation
-- alone instead of holding up the batch (MariaDB refuses NOWAIT inside a
-- stored routine), and a batch never waits in a deadlock. Under the lock,
-- the newest committed version decides the fencing, and the write changes
-- only what the lock protects.
--
-- The letters are gathered before COMMIT, and only the COMMIT and the
-- final SELECT of a variable follow it: an error there is passed on
-- (RESIGNAL) and the store takes the batch's outcome as unknown. Any error
-- before it rolls the transaction back and answers "A".
CREATE PROCEDURE {{batch_proc}}(IN p_ops LONGTEXT)
    MODIFIES SQL DATA
    SQL SECURITY INVOKER
    COMMENT 'retrysafe batch (github.com/retrysafe/retrysafe/store/mysql)'
BEGIN
    DECLARE v_end BOOLEAN DEFAULT FALSE;
    DECLARE v_found BOOLEAN;
    DECLARE v_locked BOOLEAN DEFAULT FALSE;
    DECLARE v_dup BOOLEAN DEFAULT FALSE;
    DECLARE v_committing BOOLEAN DEFAULT FALSE;
    DECLARE v_out LONGTEXT DEFAULT '';
    DECLARE v_letter CHAR(1);
    DECLARE v_kind CHAR(1);
    DECLARE v_scope, v_key, v_fingerprint, v_route VARBINARY(1024);
    DECLARE v_token VARBINARY(255);
    DECLARE v_now, v_until BIGINT;
    DECLARE v_status INT;
    DECLARE v_header MEDIUMBLOB;
    DECLARE v_body LONGBLOB;
    DECLARE v_abandon BOOLEAN;
    DECLARE v_cp_name VARBINARY(64);
    DECLARE v_cp_data MEDIUMBLOB;
    DECLARE v_has_cp BOOLEAN;
    DECLARE v_row_token VARBINARY(255);
    DECLARE v_row_state VARBINARY(16);
    DECLARE v_wait BIGINT DEFAULT @@SESSION.innodb_lock_wait_timeout;
    DECLARE c_ops CURSOR FOR
        SELECT kind, FROM_BASE64(scope), FROM_BASE64(idem_key), FROM_BASE64(fingerprint), FROM_BASE64(token),
               now_ns, until_ns, FROM_BASE64(route), status, FROM_BASE64(header), FROM_BASE64(body),
               abandon, FROM_BASE64(cp_name), FROM_BASE64(cp_data), cp_name IS NOT NULL
          FROM JSON_TABLE(p_ops, '$[*]' COLUMNS (
               kind VARCHAR(1) PATH '$[0]', scope TEXT PATH '$[1]', idem_key TEXT PATH '$[2]',
               fingerprint TEXT PATH '$[3]', token TEXT PATH '$[4]', now_ns BIGINT PATH '$[5]',
               until_ns BIGINT PATH '$[6]', route TEXT PATH '$[7]', status INT PATH '$[8]',
               header LONGTEXT PATH '$[9]', body LONGTEXT PATH '$[10]', abandon BOOLEAN PATH '$[11]',
               cp_name TEXT PATH '$[12]', cp_data LONGTEXT PATH '$[13]')) AS ops;
    DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_found = FALSE;
    -- ER_LOCK_WAIT_TIMEOUT: the row is held by another transaction.
    DECLARE CONTINUE HANDLER FOR 1205 SET v_locked = TRUE;
    -- ER_DUP_ENTRY: a concurrent claimant inserted the key meanwhile.
    DECLARE CONTINUE HANDLER FOR 1062 SET v_dup = TRUE;
    DECLARE EXIT HANDLER FOR SQLEXCEPTION
    BEGIN
        ROLLBACK;
        SET SESSION innodb_lock_wait_timeout = v_wait;
        IF v_committing THEN
            RESIGNAL;
        END IF;
        SELECT 'A';
    END;

    SET SESSION innodb_lock_wait_timeout = 0;
    SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
    START TRANSACTION;
    OPEN c_ops;
    ops: LOOP
        SET v_found = TRUE;
        FETCH c_ops INTO v_kind, v_scope, v_key, v_fingerprint, v_token, v_now, v_until, v_route, v_status,
            v_header, v_body, v_abandon, v_cp_name, v_cp_data, v_has_cp;
        IF NOT v_found THEN
            LEAVE ops;
        END IF;
        SET v_found = TRUE, v_locked = FALSE, v_dup = FALSE, v_row_token = NULL, v_row_state = NULL;
        SELECT token, state INTO v_row_token, v_row_state
          FROM {{records}} WHERE scope = v_scope AND idem_key = v_key FOR UPDATE;
        IF v_locked THEN
            IF @@GLOBAL.innodb_rollback_on_timeout THEN
                -- The lock error may have rolled back the transaction.
                SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'retrysafe batch: a row was locked';
            END IF;
            SET v_letter = 'a';
        ELSEIF v_kind = 'c' THEN
            IF v_found THEN
                SET v_letter = 'a';
            ELSE
                INSERT INTO {{records}} (scope, idem_key, fingerprint, state, token, attempt, created_at_ns, updated_at_ns, lease_until_ns, route)
                    VALUES (v_scope, v_key, v_fingerprint, 'processing', v_token, 1, v_now, v_now, v_until, v_route);
                IF v_dup OR v_locked THEN
                    IF v_locked AND @@GLOBAL.innodb_rollback_on_timeout THEN
                        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'retrysafe batch: a row was locked';
                    END IF;
                    SET v_letter = 'a';
                ELSE
                    SET v_letter = 'c';
                END IF;
            END IF;
        ELSEIF NOT v_found OR v_row_state <> 'processing' OR v_row_token <> v_token THEN
            SET v_letter = 'l';
        ELSEIF v_kind = 'd' THEN
            UPDATE {{records}} SET state = 'completed', updated_at_ns = v_now, expires_at_ns = v_until,
                    status = v_status, header = v_header, body = v_body, abandoned = FALSE, revision = revision + 1
                WHERE scope = v_scope AND idem_key = v_key;
            SET v_letter = 'd';
        ELSEIF v_kind = 'r' THEN
            DELETE FROM {{records}} WHERE scope = v_scope AND idem_key = v_key;
            SET v_letter = 'd';
        ELSEIF v_kind = 'e' THEN
            UPDATE {{records}} SET lease_until_ns = IF(v_abandon, lease_until_ns, v_until), updated_at_ns = v_now,
                    abandoned = abandoned OR v_abandon,
                    checkpoint_name = IF(v_has_cp, v_cp_name, checkpoint_name),
                    checkpoint_data = IF(v_has_cp, v_cp_data, checkpoint_data),
                    checkpoint_at_ns = IF(v_has_cp, v_now, checkpoint_at_ns), revision = revision + 1
                WHERE scope = v_scope AND idem_key = v_key;
            SET v_letter = 'd';
        ELSE
            SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'retrysafe batch: unknown operation';
        END IF;
        SET v_out = CONCAT(v_out, v_letter);
    END LOOP;
    CLOSE c_ops;
    SET SESSION innodb_lock_wait_timeout = v_wait;
    SET v_committing = TRUE;
    COMMIT;
    SELECT v_out;
END
