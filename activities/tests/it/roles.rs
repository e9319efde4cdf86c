//! Least-privilege database roles (migration 0007) against the real PostgreSQL of the local stack
//! (`bash deploy/local/up && source .state/env`): connected as the worker role (DATABASE_URL) and
//! as the serving role (BUZZ_SERVING_DATABASE_URL), nobody can take the evidence's protection
//! away or rewrite the evidence; the owner (BUZZ_OWNER_DATABASE_URL) is bound by the same
//! triggers and its schema changes are recorded.

use crate::store_support;

use activities::store::{PrivilegedRole, Store};
use sqlx::PgPool;
use store_support::*;
use uuid::Uuid;

/// SQLSTATE of "insufficient privilege" (also "must be owner of table").
const INSUFFICIENT_PRIVILEGE: &str = "42501";
/// SQLSTATE our triggers raise for a refused change of evidence.
const APPEND_ONLY: &str = "BZ002";

/// Evidence rows of one request, written as the owner (fixture setup).
struct Evidence {
    request_id: Uuid,
    /// A manifest chunk with `deleted_at` set.
    stamped_chunk: i32,
    /// A manifest chunk not yet stamped.
    unstamped_chunk: i32,
    /// A completed stage row the request has left.
    left_stage: Uuid,
    /// The request's current stage row (pending).
    current_stage: Uuid,
}

async fn evidence(owner: &Store) -> Evidence {
    let request_id = Uuid::new_v4();
    let left_stage = Uuid::new_v4();
    let current_stage = Uuid::new_v4();
    let mut tx = owner.pool().begin().await.expect("begin");
    // Two registered keys and their stored signatures: an approval row must name one (0008).
    let fingerprint = |tag: &str| {
        let hex = format!("{}{}", Uuid::new_v4().simple(), Uuid::new_v4().simple());
        format!("SHA256:{tag}{}", &hex[..43 - tag.len()])
    };
    let (requester, approver) = (fingerprint("A"), fingerprint("B"));
    let (submit_nonce, approve_nonce) = (Uuid::new_v4().simple(), Uuid::new_v4().simple());
    let registry = format!(
        "INSERT INTO deletion.operators (fingerprint, name, public_key, algorithm) VALUES \
         ('{requester}', 'roles-a-{submit_nonce}', 'ssh-ed25519 AAAA', 'ssh-ed25519'), \
         ('{approver}', 'roles-b-{approve_nonce}', 'ssh-ed25519 AAAA', 'ssh-ed25519')"
    );
    let signatures = format!(
        "INSERT INTO deletion.operator_signatures (fingerprint, nonce, action, kind, request_id, \
         digest, statement, signature, signed_at, consumed_by) VALUES \
         ('{requester}', '{submit_nonce}', 'submit', 'user', $1, NULL, 's', 'sig', now(), 'roles'), \
         ('{approver}', '{approve_nonce}', 'approve', 'user', $1, 'digest', 's', 'sig', now(), 'roles')"
    );
    let request = format!(
        "INSERT INTO deletion.requests (id, kind, target, workflow_id, requested_by, stage, \
         requested_fingerprint, requested_nonce) VALUES ($1, 'user', 'roles-test-target', \
         'roles-test-' || $1::text, 'operator-a', 'running', '{requester}', '{submit_nonce}')"
    );
    let approval = format!(
        "INSERT INTO deletion.approvals (request_id, approved_by, inventory_digest, \
         approved_fingerprint, approved_nonce) \
         VALUES ($1, 'operator-b', 'digest', '{approver}', '{approve_nonce}')"
    );
    for sql in [registry, signatures, request, approval] {
        sqlx::query(sqlx::AssertSqlSafe(sql.clone()))
            .bind(request_id)
            .execute(&mut *tx)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }
    for sql in [
        "INSERT INTO deletion.checkpoints (request_id, stage, exec_generation) \
         VALUES ($1, 'approved', 1)",
        // The request's first audit event, chained as the store writes it (0010).
        "INSERT INTO deletion.audit_events (request_id, at, actor, event, seq, prev_hash, row_hash) \
         SELECT $1, at, 'operator-b', 'approved', 1, repeat('0', 64), repeat('a', 64) \
         FROM (SELECT date_trunc('microseconds', now()) AS at) t",
        "INSERT INTO deletion.purge_progress (request_id, table_name, rows_deleted) \
         VALUES ($1, 'buzz.events', 5)",
        "INSERT INTO deletion.manifest_chunks \
         (request_id, chunk_no, prefix, entries, entry_count, exec_generation, deleted_at, \
          deleted_versions, stamp_generation) \
         VALUES ($1, 0, 'media/x/', '[\"a\"]', 1, 1, now(), 1, 1), \
                ($1, 1, 'media/x/', '[\"b\"]', 1, 1, NULL, NULL, NULL)",
    ] {
        sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(request_id)
            .execute(&mut *tx)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }
    sqlx::query(
        "INSERT INTO deletion.user_stage_history \
         (id, request_id, stage, status, is_current, attempt, exec_generation, first_started_at, \
          started_at, finished_at, inputs, result, transition, previous_stage_id) \
         VALUES ($2, $1, 'revoke_sessions', 'completed', false, 1, 1, now(), now(), now(), \
                 '{}', '{\"revoked\": 3}', '{\"next\": \"erase_messages\"}', NULL), \
                ($3, $1, 'erase_messages', 'pending', true, 0, NULL, NULL, NULL, NULL, \
                 '{}', NULL, NULL, $2)",
    )
    .bind(request_id)
    .bind(left_stage)
    .bind(current_stage)
    .execute(&mut *tx)
    .await
    .expect("stage history rows");
    tx.commit().await.expect("commit evidence");
    Evidence {
        request_id,
        stamped_chunk: 0,
        unstamped_chunk: 1,
        left_stage,
        current_stage,
    }
}

/// Runs `sql` (binding the request id, then `extra` if given) and returns its SQLSTATE, or
/// `None` if it succeeded.
async fn sqlstate(
    pool: &PgPool,
    sql: &str,
    request_id: Uuid,
    extra: Option<Uuid>,
) -> Option<String> {
    let mut query = sqlx::query(sqlx::AssertSqlSafe(sql.to_owned()));
    if sql.contains("$1") {
        query = query.bind(request_id);
    }
    if let Some(extra) = extra {
        query = query.bind(extra);
    }
    match query.execute(pool).await {
        Ok(_) => None,
        Err(sqlx::Error::Database(db)) => db.code().map(|c| c.into_owned()),
        Err(other) => panic!("{sql}: not a database error: {other}"),
    }
}

async fn assert_refused(pool: &PgPool, role: &str, sql: &str, evidence: &Evidence, code: &str) {
    let got = sqlstate(pool, sql, evidence.request_id, None).await;
    assert_eq!(
        got.as_deref(),
        Some(code),
        "as the {role} role, `{sql}` must be refused with SQLSTATE {code}"
    );
}

/// Every way to take the evidence's protection away, or to rewrite it, that a non-owner role
/// might try: each must fail on privileges (42501) before anything changes.
const TAMPERING: &[&str] = &[
    "ALTER TABLE deletion.approvals DISABLE TRIGGER approvals_append_only",
    "ALTER TABLE deletion.audit_events DISABLE TRIGGER ALL",
    "ALTER TABLE deletion.checkpoints DISABLE TRIGGER checkpoints_append_only",
    "ALTER TABLE deletion.manifest_chunks DISABLE TRIGGER manifest_chunks_stamped_are_final",
    "ALTER TABLE deletion.user_stage_history DISABLE TRIGGER user_stage_history_final_rows",
    "ALTER TABLE buzz.events DISABLE TRIGGER buzz_write_fence",
    "DROP TRIGGER approvals_append_only ON deletion.approvals",
    "DROP TRIGGER checkpoints_no_truncate ON deletion.checkpoints",
    "DROP TRIGGER manifest_chunks_stamped_are_final ON deletion.manifest_chunks",
    "DROP TRIGGER buzz_write_fence ON buzz.events",
    "ALTER TABLE deletion.audit_events ADD COLUMN forged text",
    "DROP TABLE deletion.approvals",
    "TRUNCATE deletion.approvals",
    "TRUNCATE deletion.audit_events",
    "TRUNCATE deletion.checkpoints",
    "TRUNCATE deletion.manifest_chunks",
    "TRUNCATE deletion.user_stage_history",
    "TRUNCATE deletion.requests",
    "TRUNCATE buzz.events",
    "SET session_replication_role = replica",
    "UPDATE deletion.approvals SET approved_by = 'mallory' WHERE request_id = $1",
    "DELETE FROM deletion.approvals WHERE request_id = $1",
    "UPDATE deletion.audit_events SET actor = 'mallory' WHERE request_id = $1",
    "DELETE FROM deletion.audit_events WHERE request_id = $1",
    "UPDATE deletion.checkpoints SET detail = '{\"forged\": true}' WHERE request_id = $1",
    "DELETE FROM deletion.checkpoints WHERE request_id = $1",
    "DELETE FROM deletion.requests WHERE id = $1",
    // Deletion certificates (0010): receipts, the transparency log and its checkpoints.
    "ALTER TABLE deletion.audit_events DISABLE TRIGGER audit_events_extend_chain",
    "ALTER TABLE deletion.transparency_log DISABLE TRIGGER transparency_log_append_only",
    "UPDATE deletion.audit_events SET row_hash = repeat('0', 64) WHERE request_id = $1",
    "UPDATE deletion.receipts SET signed = '{}' WHERE request_id = $1",
    "DELETE FROM deletion.receipts WHERE request_id = $1",
    "TRUNCATE deletion.receipts",
    "UPDATE deletion.transparency_log SET leaf_index = leaf_index + 1",
    "DELETE FROM deletion.transparency_log WHERE request_id = $1",
    "TRUNCATE deletion.transparency_log",
    "UPDATE deletion.log_checkpoints SET root_hash = repeat('0', 64)",
    "DELETE FROM deletion.log_checkpoints",
    "TRUNCATE deletion.log_checkpoints",
    "DELETE FROM deletion.receipt_archives WHERE request_id = $1",
    // Purge counters (0018): the worker adds to them, never removes one.
    "DELETE FROM deletion.purge_progress WHERE request_id = $1",
    "TRUNCATE deletion.purge_progress",
    "ALTER TABLE deletion.purge_progress DISABLE TRIGGER purge_progress_only_grows",
];

/// What the worker may do to a table but a trigger refuses for evidence rows.
const REFUSED_BY_TRIGGER_FOR_THE_WORKER: &[&str] = &[
    "UPDATE deletion.manifest_chunks SET deleted_versions = 0 WHERE request_id = $1 AND chunk_no = 0",
    "UPDATE deletion.manifest_chunks SET deleted_at = NULL WHERE request_id = $1 AND chunk_no = 0",
    "DELETE FROM deletion.manifest_chunks WHERE request_id = $1 AND chunk_no = 0",
    "UPDATE deletion.user_stage_history SET result = '{\"revoked\": 0}' \
     WHERE request_id = $1 AND NOT is_current",
    "UPDATE deletion.user_stage_history SET is_current = true, transition = NULL \
     WHERE request_id = $1 AND NOT is_current",
    "UPDATE deletion.purge_progress SET rows_deleted = 0 WHERE request_id = $1",
    "UPDATE deletion.purge_progress SET table_name = 'buzz.agents' WHERE request_id = $1",
];

async fn evidence_is_intact(owner: &Store, evidence: &Evidence) {
    let (approver, actor, detail, chunk, result): (String, String, String, Option<i64>, String) =
        sqlx::query_as(
            "SELECT (SELECT approved_by FROM deletion.approvals WHERE request_id = $1), \
                    (SELECT actor FROM deletion.audit_events WHERE request_id = $1), \
                    (SELECT detail::text FROM deletion.checkpoints WHERE request_id = $1), \
                    (SELECT deleted_versions FROM deletion.manifest_chunks \
                      WHERE request_id = $1 AND chunk_no = $2), \
                    (SELECT result::text FROM deletion.user_stage_history WHERE id = $3)",
        )
        .bind(evidence.request_id)
        .bind(evidence.stamped_chunk)
        .bind(evidence.left_stage)
        .fetch_one(owner.pool())
        .await
        .expect("read evidence");
    assert_eq!(
        (
            approver.as_str(),
            actor.as_str(),
            detail.as_str(),
            chunk,
            result.as_str()
        ),
        (
            "operator-b",
            "operator-b",
            "{}",
            Some(1),
            "{\"revoked\": 3}"
        ),
        "evidence was changed"
    );
    let counted: i64 = scalar_for(
        owner,
        "SELECT rows_deleted FROM deletion.purge_progress WHERE request_id = $1",
        evidence.request_id,
    )
    .await;
    assert_eq!(counted, 5, "a purge count was lowered");
}

#[tokio::test]
async fn the_worker_role_cannot_disable_drop_truncate_or_rewrite_evidence() {
    let owner = store().await;
    let worker = worker_store().await;
    let evidence = evidence(&owner).await;
    for sql in TAMPERING {
        assert_refused(
            worker.pool(),
            "worker",
            sql,
            &evidence,
            INSUFFICIENT_PRIVILEGE,
        )
        .await;
    }
    for sql in REFUSED_BY_TRIGGER_FOR_THE_WORKER {
        assert_refused(worker.pool(), "worker", sql, &evidence, APPEND_ONLY).await;
    }
    evidence_is_intact(&owner, &evidence).await;
}

#[tokio::test]
async fn the_serving_role_cannot_touch_the_deletion_schema_at_all() {
    let owner = store().await;
    let serving = serving_store().await;
    let evidence = evidence(&owner).await;
    for sql in TAMPERING.iter().chain(REFUSED_BY_TRIGGER_FOR_THE_WORKER) {
        assert_refused(
            serving.pool(),
            "serving",
            sql,
            &evidence,
            INSUFFICIENT_PRIVILEGE,
        )
        .await;
    }
    // Not even reading the proof, or writing a lease or a fence state directly.
    for sql in [
        "SELECT count(*) FROM deletion.requests WHERE id = $1",
        "SELECT count(*) FROM deletion.serving_write_leases WHERE community_id = $1",
        "INSERT INTO deletion.serving_write_leases \
         (id, community_id, operation, owner, fence_generation, expires_at) \
         VALUES (gen_random_uuid(), $1, 's3_put', 'mallory', 0, now() + interval '1 year')",
        "UPDATE deletion.community_fences SET state = 'serving' WHERE community_id = $1",
        "INSERT INTO deletion.audit_events (request_id, actor, event) VALUES ($1, 'mallory', 'x')",
    ] {
        assert_refused(
            serving.pool(),
            "serving",
            sql,
            &evidence,
            INSUFFICIENT_PRIVILEGE,
        )
        .await;
    }
    evidence_is_intact(&owner, &evidence).await;
}

#[tokio::test]
async fn the_worker_can_still_stamp_an_unstamped_chunk_and_leave_a_completed_current_stage() {
    let owner = store().await;
    let worker = worker_store().await;
    let evidence = evidence(&owner).await;
    let stamp = "UPDATE deletion.manifest_chunks SET deleted_at = now(), deleted_versions = 1, \
                 stamp_generation = 2 WHERE request_id = $1 AND chunk_no = 1";
    assert_eq!(
        sqlstate(worker.pool(), stamp, evidence.request_id, None).await,
        None
    );
    // Once stamped it is final, for the worker as for anyone.
    assert_eq!(
        sqlstate(worker.pool(), stamp, evidence.request_id, None)
            .await
            .as_deref(),
        Some(APPEND_ONLY)
    );
    let unstamped = "SELECT count(*) FROM deletion.manifest_chunks \
                     WHERE request_id = $1 AND deleted_at IS NULL";
    let unstamped_left: i64 = scalar_for(&owner, unstamped, evidence.request_id).await;
    assert_eq!(
        unstamped_left, 0,
        "chunk {} was stamped",
        evidence.unstamped_chunk
    );

    // The current stage completes (allowed), then can only be left with its decision.
    let complete = "UPDATE deletion.user_stage_history SET status = 'completed', attempt = 1, \
                    first_started_at = now(), started_at = now(), finished_at = now(), \
                    result = '{\"erased\": 10}' WHERE request_id = $1 AND id = $2";
    assert_eq!(
        sqlstate(
            worker.pool(),
            complete,
            evidence.request_id,
            Some(evidence.current_stage)
        )
        .await,
        None
    );
    let rewrite = "UPDATE deletion.user_stage_history SET result = '{\"erased\": 0}' \
                   WHERE request_id = $1 AND id = $2";
    assert_eq!(
        sqlstate(
            worker.pool(),
            rewrite,
            evidence.request_id,
            Some(evidence.current_stage)
        )
        .await
        .as_deref(),
        Some(APPEND_ONLY),
        "a completed stage's result cannot be changed"
    );
    let leave = "UPDATE deletion.user_stage_history SET is_current = false, \
                 transition = '{\"next\": null}' WHERE request_id = $1 AND id = $2";
    assert_eq!(
        sqlstate(
            worker.pool(),
            leave,
            evidence.request_id,
            Some(evidence.current_stage)
        )
        .await,
        None
    );
    assert_eq!(
        sqlstate(
            worker.pool(),
            rewrite,
            evidence.request_id,
            Some(evidence.current_stage)
        )
        .await
        .as_deref(),
        Some(APPEND_ONLY),
        "a left stage is final"
    );
}

#[tokio::test]
async fn a_completed_stage_history_row_is_final_for_every_role_and_the_owners_bypass_is_recorded() {
    let (owner, worker, serving) = every_role().await;
    let evidence = evidence(&owner).await;
    let rewrite = "UPDATE deletion.user_stage_history SET result = '{\"revoked\": 0}' \
                   WHERE request_id = $1 AND id = $2";
    for (role, pool, code) in [
        ("worker", worker.pool(), APPEND_ONLY),
        ("serving", serving.pool(), INSUFFICIENT_PRIVILEGE),
        ("owner", owner.pool(), APPEND_ONLY),
    ] {
        assert_eq!(
            sqlstate(
                pool,
                rewrite,
                evidence.request_id,
                Some(evidence.left_stage)
            )
            .await
            .as_deref(),
            Some(code),
            "the {role} role rewrote a completed stage row"
        );
    }
    // Only the owner can take the trigger away, and doing so is recorded in the audit trail by
    // the schema-change event trigger (deploy/postgres/owner_ddl_audit.sql). Rolled back: the
    // record commits exactly when the change does.
    let mut tx = owner.pool().begin().await.expect("begin");
    let before: i64 = sqlx::query_scalar("SELECT coalesce(max(id), 0) FROM deletion.audit_events")
        .fetch_one(&mut *tx)
        .await
        .expect("max audit id");
    sqlx::query(
        "ALTER TABLE deletion.user_stage_history DISABLE TRIGGER user_stage_history_final_rows",
    )
    .execute(&mut *tx)
    .await
    .expect("the owner may disable the trigger");
    let recorded: Vec<(String, String)> = sqlx::query_as(
        "SELECT actor, detail->>'statement' FROM deletion.audit_events \
         WHERE id > $1 AND event = 'schema_changed' AND detail->>'command' = 'ALTER TABLE'",
    )
    .bind(before)
    .fetch_all(&mut *tx)
    .await
    .expect("read audit");
    tx.rollback().await.expect("rollback");
    assert!(
        recorded
            .iter()
            .any(|(_, statement)| statement
                .contains("DISABLE TRIGGER user_stage_history_final_rows")),
        "the owner's DDL was not recorded in deletion.audit_events ({recorded:?}): install \
         deploy/postgres/owner_ddl_audit.sql as a superuser (deploy/local/up does)"
    );
    evidence_is_intact(&owner, &evidence).await;
}

#[tokio::test]
async fn only_the_owner_counts_as_privileged() {
    let owner = store().await;
    match owner.privileged_role().await.expect("owner role") {
        Some(PrivilegedRole::SchemaOwner { schemas, .. }) => {
            assert_eq!(schemas.len(), 2, "{schemas:?}");
        }
        other => panic!("BUZZ_OWNER_DATABASE_URL must be the schema owner, got {other:?}"),
    }
    for (role, store) in [
        ("worker", worker_store().await),
        ("serving", serving_store().await),
    ] {
        assert_eq!(
            store.privileged_role().await.expect("role"),
            None,
            "the {role} role must be neither superuser nor schema owner"
        );
    }
}

#[tokio::test]
async fn tables_and_functions_added_later_get_the_same_grants_by_default() {
    let owner = store().await;
    // Uncommitted: no concurrent test's catalog scan ever sees this table.
    let mut tx = owner.pool().begin().await.expect("begin");
    sqlx::query("CREATE TABLE buzz.roles_probe (community_id uuid NOT NULL, note text)")
        .execute(&mut *tx)
        .await
        .expect("create table");
    sqlx::query(
        "CREATE FUNCTION deletion.roles_probe() RETURNS integer \
         LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog AS 'SELECT 1'",
    )
    .execute(&mut *tx)
    .await
    .expect("create function");
    let callers: (bool, bool, bool) = sqlx::query_as(
        "SELECT has_function_privilege('buzz_deletion_worker', 'deletion.roles_probe()', 'EXECUTE'), \
                has_function_privilege('buzz_deletion_serving', 'deletion.roles_probe()', 'EXECUTE'), \
                has_function_privilege('public', 'deletion.roles_probe()', 'EXECUTE')",
    )
    .fetch_one(&mut *tx)
    .await
    .expect("function privileges");
    let grants: Vec<(String, String, bool)> = sqlx::query_as(
        "SELECT r.role, p.privilege, has_table_privilege(r.role, 'buzz.roles_probe', p.privilege) \
         FROM unnest(ARRAY['buzz_deletion_worker', 'buzz_deletion_serving']) AS r(role), \
              unnest(ARRAY['SELECT', 'INSERT', 'UPDATE', 'DELETE', 'TRUNCATE']) AS p(privilege) \
         ORDER BY 1, 2",
    )
    .fetch_all(&mut *tx)
    .await
    .expect("privileges");
    tx.rollback().await.expect("rollback");
    let granted = |role: &str| -> Vec<&str> {
        grants
            .iter()
            .filter(|(r, _, has)| r == role && *has)
            .map(|(_, privilege, _)| privilege.as_str())
            .collect()
    };
    assert_eq!(granted("buzz_deletion_worker"), ["DELETE", "SELECT"]);
    assert_eq!(
        granted("buzz_deletion_serving"),
        ["DELETE", "INSERT", "SELECT", "UPDATE"]
    );
    // A SECURITY DEFINER function added to `deletion` later is the worker's, not the serving
    // side's, until a migration grants it explicitly.
    assert_eq!(
        callers,
        (true, false, false),
        "(worker, serving, public) may execute"
    );
}

#[tokio::test]
async fn the_serving_role_writes_tenant_rows_and_leases_only_through_the_lease_functions() {
    let owner = store().await;
    let serving = serving_store().await;
    let community = community(&serving).await;
    demo::seed_rows(&serving, community.id, 2)
        .await
        .expect("the serving role writes tenant rows");
    let lease = serving
        .serving()
        .acquire_serving_write_lease(
            community.id,
            "s3_put",
            "relay-roles",
            std::time::Duration::from_secs(30),
        )
        .await
        .expect("acquire through the SECURITY DEFINER function");
    serving
        .renew_serving_write_lease(&lease, std::time::Duration::from_secs(30))
        .await
        .expect("renew");
    serving
        .verify_serving_write_lease(&lease)
        .await
        .expect("verify");
    assert_eq!(
        serving
            .live_serving_writes(community.id)
            .await
            .expect("live")
            .count,
        1
    );
    assert!(
        serving
            .release_serving_write_lease(&lease)
            .await
            .expect("release")
    );
    let released: Option<chrono::DateTime<chrono::Utc>> = scalar_for(
        &owner,
        "SELECT released_at FROM deletion.serving_write_leases WHERE id = $1",
        lease.id,
    )
    .await;
    assert!(released.is_some(), "the release reached the lease row");
    // A lease nobody could ever renew past a day is refused by the function itself.
    let forever = serving
        .serving()
        .acquire_serving_write_lease(
            community.id,
            "s3_put",
            "relay-roles",
            std::time::Duration::from_secs(400 * 86_400),
        )
        .await;
    assert!(forever.is_err(), "a year-long lease was admitted");
}
