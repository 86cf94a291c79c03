-- The store's stored routines: the claim procedure and the batch
-- procedure. Migrate runs this file with the last migration it applies
-- (statements separated by a line "-- ;"); a change to it ships with a new
-- numbered migration. {{records}} is the records table, {{claim_proc}} and
-- {{batch_proc}} the procedures' names.
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
-- Set-based, no cursor and no loop: a few statements per batch, whatever
-- its size, each joining the records table by primary key to the
-- operations (JSON_TABLE, read first: eq_ref on the primary key).
-- 1. One locking read (FOR UPDATE SKIP LOCKED; READ COMMITTED takes no gap
--    lock on an absent key) locks every row of the batch that no other
--    transaction holds and decides each operation under its lock, on the
--    newest committed version: a claim of a key with a record is left
--    alone; a fenced operation is done (its kind's letter until step 3)
--    or lost. A row that is absent or held elsewhere is not returned: a
--    claim of it is inserted; for a fenced operation of it, a plain read
--    (only then) tells: no committed row, lost; a row another transaction
--    holds, alone (its single statement waits for the holder).
-- 2. One statement per kind present: the INSERT of the claims, the
--    INSERT ... ON DUPLICATE KEY UPDATE of the completions (below), the
--    DELETE of the releases, the UPDATE of the extensions, each of exactly
--    the rows it decided (the row count is checked). The completions, the
--    extensions and the releases touch only rows the batch has locked. The INSERT runs with the session's innodb_lock_wait_timeout
--    at its minimum (0 on MariaDB: no wait; MySQL 8 raises it to 1
--    second), so that an insert that meets a row another transaction
--    inserted since the read (or holds) fails instead of waiting: the
--    batch is then rolled back whole ("A"). (Not during the locking read:
--    on MariaDB 10.11 a row skipped by SKIP LOCKED under a timeout of 0
--    makes the COMMIT fail, error 1180.)
-- 3. The letters, COMMIT, and the final SELECT of a variable: an error in
--    the COMMIT is passed on (RESIGNAL) and the store takes the batch's
--    outcome as unknown. Any error before it rolls the transaction back
--    and answers "A". The session's innodb_lock_wait_timeout and
--    group_concat_max_len (raised so that one letter per operation
--    always fits) are put back either way.
CREATE PROCEDURE {{batch_proc}}(IN p_ops LONGTEXT)
    MODIFIES SQL DATA
    SQL SECURITY INVOKER
    COMMENT 'retrysafe batch (github.com/retrysafe/retrysafe/store/mysql)'
BEGIN
    DECLARE v_committing BOOLEAN DEFAULT FALSE;
    DECLARE v_out, v_plain LONGTEXT;
    DECLARE v_wait BIGINT DEFAULT @@SESSION.innodb_lock_wait_timeout;
    DECLARE v_concat BIGINT DEFAULT @@SESSION.group_concat_max_len;
    DECLARE EXIT HANDLER FOR SQLEXCEPTION
    BEGIN
        ROLLBACK;
        SET SESSION innodb_lock_wait_timeout = v_wait, SESSION group_concat_max_len = v_concat;
        IF v_committing THEN
            RESIGNAL;
        END IF;
        SELECT 'A';
    END;

    SET SESSION group_concat_max_len = GREATEST(v_concat, LENGTH(p_ops));
    SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
    START TRANSACTION;
    SELECT GROUP_CONCAT(CASE
               WHEN o.kind IS NULL OR o.kind NOT IN ('c', 'd', 'r', 'e') THEN NULL
               WHEN r.scope IS NULL THEN IF(o.kind = 'c', 'c', '?')
               WHEN o.kind = 'c' THEN 'a'
               WHEN r.state = 'processing' AND r.token = FROM_BASE64(o.token) THEN o.kind
               ELSE 'l' END ORDER BY o.ord SEPARATOR '')
      INTO v_out
      FROM JSON_TABLE(p_ops, '$[*]' COLUMNS (
               ord FOR ORDINALITY, kind VARCHAR(1) PATH '$[0]', scope TEXT PATH '$[1]', idem_key TEXT PATH '$[2]',
               fingerprint TEXT PATH '$[3]', token TEXT PATH '$[4]', now_ns BIGINT PATH '$[5]',
               until_ns BIGINT PATH '$[6]', route TEXT PATH '$[7]', status INT PATH '$[8]',
               header LONGTEXT PATH '$[9]', body LONGTEXT PATH '$[10]', abandon BOOLEAN PATH '$[11]',
               cp_name TEXT PATH '$[12]', cp_data LONGTEXT PATH '$[13]')) AS o
      LEFT JOIN {{records}} AS r ON r.scope = FROM_BASE64(o.scope) AND r.idem_key = FROM_BASE64(o.idem_key)
      FOR UPDATE SKIP LOCKED;
    IF v_out IS NULL OR LENGTH(v_out) <> JSON_LENGTH(p_ops) THEN
        -- An unknown kind is NULL, which GROUP_CONCAT leaves out.
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'retrysafe batch: an operation did not decode';
    END IF;
    IF LOCATE('?', v_out) > 0 THEN
        -- A fenced operation whose row is absent or held: the newest
        -- committed version (a plain read) tells which.
        SELECT GROUP_CONCAT(IF(SUBSTRING(v_out, o.ord, 1) <> '?', SUBSTRING(v_out, o.ord, 1), IF(r.scope IS NULL, 'l', 'a'))
               ORDER BY o.ord SEPARATOR '')
          INTO v_plain
          FROM JSON_TABLE(p_ops, '$[*]' COLUMNS (
               ord FOR ORDINALITY, kind VARCHAR(1) PATH '$[0]', scope TEXT PATH '$[1]', idem_key TEXT PATH '$[2]',
               fingerprint TEXT PATH '$[3]', token TEXT PATH '$[4]', now_ns BIGINT PATH '$[5]',
               until_ns BIGINT PATH '$[6]', route TEXT PATH '$[7]', status INT PATH '$[8]',
               header LONGTEXT PATH '$[9]', body LONGTEXT PATH '$[10]', abandon BOOLEAN PATH '$[11]',
               cp_name TEXT PATH '$[12]', cp_data LONGTEXT PATH '$[13]')) AS o
          LEFT JOIN {{records}} AS r ON r.scope = FROM_BASE64(o.scope) AND r.idem_key = FROM_BASE64(o.idem_key);
        SET v_out = v_plain;
    END IF;
    IF LOCATE('c', v_out) > 0 THEN
        SET SESSION innodb_lock_wait_timeout = 0;
        INSERT INTO {{records}} (scope, idem_key, fingerprint, state, token, attempt, created_at_ns, updated_at_ns, lease_until_ns, route)
            SELECT FROM_BASE64(o.scope), FROM_BASE64(o.idem_key), FROM_BASE64(o.fingerprint), 'processing', FROM_BASE64(o.token),
                   1, o.now_ns, o.now_ns, o.until_ns, FROM_BASE64(o.route)
              FROM JSON_TABLE(p_ops, '$[*]' COLUMNS (
               ord FOR ORDINALITY, kind VARCHAR(1) PATH '$[0]', scope TEXT PATH '$[1]', idem_key TEXT PATH '$[2]',
               fingerprint TEXT PATH '$[3]', token TEXT PATH '$[4]', now_ns BIGINT PATH '$[5]',
               until_ns BIGINT PATH '$[6]', route TEXT PATH '$[7]', status INT PATH '$[8]',
               header LONGTEXT PATH '$[9]', body LONGTEXT PATH '$[10]', abandon BOOLEAN PATH '$[11]',
               cp_name TEXT PATH '$[12]', cp_data LONGTEXT PATH '$[13]')) AS o
             WHERE SUBSTRING(v_out, o.ord, 1) = 'c';
        IF ROW_COUNT() <> LENGTH(v_out) - LENGTH(REPLACE(v_out, 'c', '')) THEN
            SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'retrysafe batch: a claim was not inserted';
        END IF;
        SET SESSION innodb_lock_wait_timeout = v_wait;
    END IF;
    IF LOCATE('d', v_out) > 0 THEN
        -- The completions: an INSERT whose every row is a duplicate key,
        -- so that ON DUPLICATE KEY UPDATE completes it. Every 'd' row
        -- exists and is locked by this transaction (the locking read), so
        -- none is inserted: the row count, 2 per updated row (revision
        -- always changes) and 1 per inserted one, is checked, and an
        -- insert would roll the batch back. (A multi-table UPDATE joined
        -- to JSON_TABLE updates the records table from a temporary table
        -- of the new values, which MariaDB writes to disk for the BLOB
        -- columns: about 0.5 ms per batch of ten on this statement alone.)
        INSERT INTO {{records}} (scope, idem_key, fingerprint, state, token, attempt, created_at_ns, updated_at_ns, lease_until_ns)
            SELECT FROM_BASE64(o.scope), FROM_BASE64(o.idem_key), '', 'completed', '', 0, 0, 0, 0
              FROM JSON_TABLE(p_ops, '$[*]' COLUMNS (
               ord FOR ORDINALITY, kind VARCHAR(1) PATH '$[0]', scope TEXT PATH '$[1]', idem_key TEXT PATH '$[2]',
               fingerprint TEXT PATH '$[3]', token TEXT PATH '$[4]', now_ns BIGINT PATH '$[5]',
               until_ns BIGINT PATH '$[6]', route TEXT PATH '$[7]', status INT PATH '$[8]',
               header LONGTEXT PATH '$[9]', body LONGTEXT PATH '$[10]', abandon BOOLEAN PATH '$[11]',
               cp_name TEXT PATH '$[12]', cp_data LONGTEXT PATH '$[13]')) AS o
             WHERE SUBSTRING(v_out, o.ord, 1) = 'd'
        ON DUPLICATE KEY UPDATE state = 'completed', updated_at_ns = o.now_ns, expires_at_ns = o.until_ns, status = o.status,
               header = FROM_BASE64(o.header), body = FROM_BASE64(o.body), abandoned = FALSE, revision = revision + 1;
        IF ROW_COUNT() <> 2 * (LENGTH(v_out) - LENGTH(REPLACE(v_out, 'd', ''))) THEN
            SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'retrysafe batch: a completion matched no row';
        END IF;
    END IF;
    IF LOCATE('r', v_out) > 0 THEN
        DELETE r FROM JSON_TABLE(p_ops, '$[*]' COLUMNS (
               ord FOR ORDINALITY, kind VARCHAR(1) PATH '$[0]', scope TEXT PATH '$[1]', idem_key TEXT PATH '$[2]',
               fingerprint TEXT PATH '$[3]', token TEXT PATH '$[4]', now_ns BIGINT PATH '$[5]',
               until_ns BIGINT PATH '$[6]', route TEXT PATH '$[7]', status INT PATH '$[8]',
               header LONGTEXT PATH '$[9]', body LONGTEXT PATH '$[10]', abandon BOOLEAN PATH '$[11]',
               cp_name TEXT PATH '$[12]', cp_data LONGTEXT PATH '$[13]')) AS o
          JOIN {{records}} AS r ON r.scope = FROM_BASE64(o.scope) AND r.idem_key = FROM_BASE64(o.idem_key)
         WHERE SUBSTRING(v_out, o.ord, 1) = 'r';
        IF ROW_COUNT() <> LENGTH(v_out) - LENGTH(REPLACE(v_out, 'r', '')) THEN
            SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'retrysafe batch: a release matched no row';
        END IF;
        SET v_out = REPLACE(v_out, 'r', 'd');
    END IF;
    IF LOCATE('e', v_out) > 0 THEN
        -- An abandon leaves the lease as it is; without a checkpoint the
        -- stored one stays. Each assignment reads only its own column.
        UPDATE JSON_TABLE(p_ops, '$[*]' COLUMNS (
               ord FOR ORDINALITY, kind VARCHAR(1) PATH '$[0]', scope TEXT PATH '$[1]', idem_key TEXT PATH '$[2]',
               fingerprint TEXT PATH '$[3]', token TEXT PATH '$[4]', now_ns BIGINT PATH '$[5]',
               until_ns BIGINT PATH '$[6]', route TEXT PATH '$[7]', status INT PATH '$[8]',
               header LONGTEXT PATH '$[9]', body LONGTEXT PATH '$[10]', abandon BOOLEAN PATH '$[11]',
               cp_name TEXT PATH '$[12]', cp_data LONGTEXT PATH '$[13]')) AS o
          JOIN {{records}} AS r ON r.scope = FROM_BASE64(o.scope) AND r.idem_key = FROM_BASE64(o.idem_key)
           SET r.lease_until_ns = IF(o.abandon, r.lease_until_ns, o.until_ns), r.updated_at_ns = o.now_ns,
               r.abandoned = r.abandoned OR o.abandon,
               r.checkpoint_name = IF(o.cp_name IS NULL, r.checkpoint_name, FROM_BASE64(o.cp_name)),
               r.checkpoint_data = IF(o.cp_name IS NULL, r.checkpoint_data, FROM_BASE64(o.cp_data)),
               r.checkpoint_at_ns = IF(o.cp_name IS NULL, r.checkpoint_at_ns, o.now_ns), r.revision = r.revision + 1
         WHERE SUBSTRING(v_out, o.ord, 1) = 'e';
        IF ROW_COUNT() <> LENGTH(v_out) - LENGTH(REPLACE(v_out, 'e', '')) THEN
            SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'retrysafe batch: an extension matched no row';
        END IF;
        SET v_out = REPLACE(v_out, 'e', 'd');
    END IF;
    SET SESSION group_concat_max_len = v_concat;
    SET v_committing = TRUE;
    COMMIT;
    SELECT v_out;
END
