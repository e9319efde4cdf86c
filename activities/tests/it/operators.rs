//! The operator registry and one-time signatures on the real local PostgreSQL: only the owner
//! writes the registry; a key is revoked (recorded), never deleted or rewritten; a signature is
//! consumed once — the same activity again is an idempotent repeat, anyone else a replay; a
//! signature outside the time window, of a revoked key or forged is refused; an approval row
//! without a stored approve-signature of a second key is refused by the database itself.

use crate::store_support;

use activities::identity::{
    IdentityError, MAX_SIGNATURE_AGE_SECS, add_operator, consume_signature, revoke_operator,
};
use activities::store::StoreError;
use store_support::operators::{TestOperator, operator_in, unregistered_operator};
use store_support::*;
use uuid::Uuid;
use workflows::operator::{Action, Kind, SignedAction};

/// An abort of a fresh demo user request signed by `operator`, dated `offset` from now.
fn abort_signed_at(operator: &TestOperator, offset: chrono::Duration) -> SignedAction {
    let signed_at = (chrono::Utc::now() + offset)
        .format("%Y-%m-%dT%H:%M:%SZ")
        .to_string();
    operator.sign_at(
        Action::Abort,
        Kind::User,
        Uuid::new_v4(),
        "demo:x",
        None,
        &signed_at,
    )
}

/// A registered operator of its own (revocation tests must not touch shared names).
async fn own_operator(tag: &str) -> TestOperator {
    let owner = store().await;
    let name = format!("{tag}-{}", &Uuid::new_v4().simple().to_string()[..12]);
    operator_in(owner.pool(), &name).await
}

fn statement(operator: &TestOperator) -> SignedAction {
    operator.sign(
        Action::Unblock,
        Kind::Community,
        Uuid::new_v4(),
        "registry.test.example",
        None,
    )
}

/// Consumes `signed` in its own committed transaction, as `consumer`.
async fn consume(
    signed: &SignedAction,
    label: &str,
    consumer: &str,
) -> Result<bool, IdentityError> {
    let worker = worker_store().await;
    let mut tx = worker.pool().begin().await.expect("begin");
    let consumed = consume_signature(&mut tx, signed, label, consumer).await?;
    tx.commit().await.expect("commit");
    Ok(consumed.repeat)
}

#[tokio::test]
async fn only_the_owner_writes_the_registry_and_keys_are_revoked_never_deleted_or_changed() {
    let (owner, worker, serving) = every_role().await;
    let operator = own_operator("registry").await;
    let public = std::fs::read_to_string(&operator.public_path).expect("public key");

    // The worker may read the registry, never write it; the serving role may not even read it.
    let other = format!("intruder-{}", &Uuid::new_v4().simple().to_string()[..12]);
    let intruder = unregistered_operator("intruder");
    let intruder_key = std::fs::read_to_string(&intruder.public_path).expect("public key");
    let refused = add_operator(worker.pool(), &other, &intruder_key, false).await;
    assert!(
        matches!(&refused, Err(IdentityError::Database(e)) if e.to_string().contains("permission denied")),
        "{refused:?}"
    );
    let readable: i64 = sqlx::query_scalar("SELECT count(*) FROM deletion.operators")
        .fetch_one(worker.pool())
        .await
        .expect("the worker reads the registry");
    assert!(readable >= 1);
    for sql in [
        "UPDATE deletion.operators SET revoked_at = now(), revoked_by = 'worker' WHERE fingerprint = $1",
        "DELETE FROM deletion.operators WHERE fingerprint = $1",
    ] {
        let denied = sqlx::query(sql)
            .bind(&operator.fingerprint)
            .execute(worker.pool())
            .await
            .expect_err("the worker may not change the registry");
        assert!(denied.to_string().contains("permission denied"), "{denied}");
    }
    let hidden = sqlx::query("SELECT 1 FROM deletion.operators LIMIT 1")
        .execute(serving.pool())
        .await
        .expect_err("the serving role may not read the registry");
    assert!(hidden.to_string().contains("permission denied"), "{hidden}");

    // Not even the owner deletes a key or rewrites one.
    for sql in [
        "DELETE FROM deletion.operators WHERE fingerprint = $1",
        "UPDATE deletion.operators SET name = 'someone-else' WHERE fingerprint = $1",
    ] {
        assert_append_only(&owner, sql, &operator.fingerprint).await;
    }

    // Registering again is idempotent; another name for the same key is refused.
    let again = add_operator(owner.pool(), &operator.name, &public, false)
        .await
        .expect("same key, same name");
    assert_eq!(again.fingerprint, operator.fingerprint);
    let twice = add_operator(owner.pool(), &other, &public, false).await;
    assert_matches!(
        twice,
        Err(IdentityError::DuplicateKey { revoked: false, .. })
    );

    // Revocation is recorded once: who, when, why; a second revocation or an un-revocation is
    // refused, and the revoked key cannot come back.
    let revoked = revoke_operator(owner.pool(), &operator.name, "lost laptop")
        .await
        .expect("revoke");
    assert!(revoked.revoked_at.is_some());
    assert_eq!(revoked.revoke_reason.as_deref(), Some("lost laptop"));
    assert!(revoked.revoked_by.is_some());
    // A revocation is final.
    let unrevoke =
        "UPDATE deletion.operators SET revoked_at = NULL, revoked_by = NULL WHERE fingerprint = $1";
    assert_append_only(&owner, unrevoke, &operator.fingerprint).await;
    let back = add_operator(owner.pool(), &operator.name, &public, false).await;
    assert_matches!(back, Err(IdentityError::DuplicateKey { revoked: true, .. }));
    let gone = revoke_operator(owner.pool(), &operator.name, "again").await;
    assert_matches!(gone, Err(IdentityError::UnknownName { .. }));
}

#[tokio::test]
async fn a_signature_counts_once_an_activity_retry_is_a_repeat_and_bad_ones_are_refused() {
    let operator = own_operator("nonce").await;
    let signed = statement(&operator);
    assert!(
        !consume(&signed, &operator.name, "wf/run/1")
            .await
            .expect("first use")
    );
    assert!(
        consume(&signed, &operator.name, "wf/run/1")
            .await
            .expect("the same activity again"),
        "a retry of the consuming activity is an idempotent repeat"
    );
    let replay = consume(&signed, &operator.name, "wf/run/2").await;
    assert!(
        matches!(&replay, Err(IdentityError::Replayed { consumed_by, .. }) if consumed_by == "wf/run/1"),
        "{replay:?}"
    );

    // Signed long ago, or ahead of the database clock.
    let stale = abort_signed_at(
        &operator,
        -chrono::Duration::seconds(MAX_SIGNATURE_AGE_SECS + 30),
    );
    let expired = consume(&stale, "", "wf/run/3").await;
    assert_matches!(expired, Err(IdentityError::Expired { .. }));
    let future = abort_signed_at(&operator, chrono::Duration::minutes(5));
    let refused = consume(&future, "", "wf/run/4").await;
    assert_matches!(refused, Err(IdentityError::FromTheFuture { .. }));

    // A changed field no longer verifies; a name that is not the key's is refused.
    let mut forged = statement(&operator);
    forged.target = "other.test.example".into();
    let bad = consume(&forged, "", "wf/run/5").await;
    assert_matches!(bad, Err(IdentityError::BadSignature { .. }));
    let posing = consume(&statement(&operator), "someone-else", "wf/run/6").await;
    assert_matches!(posing, Err(IdentityError::NameMismatch { .. }));

    // After revocation nothing new is accepted, but the recorded consumption stays a repeat.
    let owner = store().await;
    revoke_operator(owner.pool(), &operator.name, "rotated")
        .await
        .expect("revoke");
    let after = consume(&statement(&operator), "", "wf/run/7").await;
    assert_matches!(after, Err(IdentityError::Revoked { .. }));
    assert!(
        consume(&signed, "", "wf/run/1")
            .await
            .expect("recorded before the revocation")
    );

    // Consumed signatures are evidence: not even the owner rewrites or deletes them.
    let rewrite = "UPDATE deletion.operator_signatures SET statement = 'x' WHERE fingerprint = $1";
    assert_append_only(&owner, rewrite, &operator.fingerprint).await;
}

#[tokio::test]
async fn an_approval_row_needs_a_stored_approve_signature_of_a_second_live_key() {
    let owner = store().await;
    let (fixture, digest) = inventoried(&owner, 0).await;
    // A role that may insert approvals still cannot write one that names no signature, nor the
    // requester's own submit signature.
    let bare = sqlx::query(
        "INSERT INTO deletion.approvals (request_id, approved_by, inventory_digest) \
         VALUES ($1, 'operator-b', $2)",
    )
    .bind(fixture.request_id)
    .bind(&digest)
    .execute(owner.pool())
    .await
    .expect_err("an unsigned approval row is refused");
    assert!(
        bare.to_string()
            .contains("names no stored operator signature"),
        "{bare}"
    );
    let submit: (String, String) = sqlx::query_as(
        "SELECT requested_fingerprint, requested_nonce FROM deletion.requests WHERE id = $1",
    )
    .bind(fixture.request_id)
    .fetch_one(owner.pool())
    .await
    .expect("the request names its submit signature");
    let own = sqlx::query(
        "INSERT INTO deletion.approvals (request_id, approved_by, inventory_digest, \
         approved_fingerprint, approved_nonce) VALUES ($1, 'operator-a', $2, $3, $4)",
    )
    .bind(fixture.request_id)
    .bind(&digest)
    .bind(&submit.0)
    .bind(&submit.1)
    .execute(owner.pool())
    .await
    .expect_err("the submit signature is no approval");
    assert!(
        own.to_string().contains("names a signature for submit"),
        "{own}"
    );

    // Through the store, the requester's key is refused and a second key approves.
    let requester = operator_in(owner.pool(), REQUESTER).await;
    let mut self_approval = fixture.signed_approval(APPROVER, &digest).await;
    self_approval.signed = Some(requester.sign(
        Action::Approve,
        Kind::Community,
        fixture.request_id,
        &fixture.community.host,
        Some(&digest),
    ));
    let refused = owner
        .record_approval(fixture.request_id, &self_approval, "wf/run/approve")
        .await;
    assert_matches!(refused, Err(StoreError::Identity(_)));
    let approval = fixture.signed_approval(APPROVER, &digest).await;
    let record = owner
        .record_approval(fixture.request_id, &approval, "wf/run/approve")
        .await
        .expect("a second key approves");
    let again = owner
        .record_approval(fixture.request_id, &approval, "wf/run/approve")
        .await
        .expect("the activity's retry returns the recorded approval");
    assert_eq!(again.approved_at, record.approved_at);
    assert_eq!(again.signed, approval.signed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_registrations_of_the_same_key_and_name_all_return_the_one_row() {
    const RACERS: usize = 8;
    let owner = store().await;
    let operator = unregistered_operator("race");
    let public = std::fs::read_to_string(&operator.public_path).expect("public key");
    let name = format!("race-{}", &Uuid::new_v4().simple().to_string()[..12]);
    // One warmed connection per racer, released together, so the registrations overlap.
    let url = testkit::env::required(stack_config::env::OWNER_DATABASE_URL);
    let barrier = std::sync::Arc::new(tokio::sync::Barrier::new(RACERS));
    let mut racers = Vec::new();
    for _ in 0..RACERS {
        let pool = sqlx::postgres::PgPoolOptions::new()
            .max_connections(1)
            .min_connections(1)
            .connect(&url)
            .await
            .expect("owner connection");
        let (barrier, name, public) = (barrier.clone(), name.clone(), public.clone());
        racers.push(tokio::spawn(async move {
            barrier.wait().await;
            add_operator(&pool, &name, &public, true).await
        }));
    }
    let mut fingerprints = Vec::new();
    for racer in racers {
        let record = racer.await.expect("racer task");
        fingerprints.push(
            record
                .unwrap_or_else(|e| panic!("a racing registration failed: {e}"))
                .fingerprint,
        );
    }
    assert!(fingerprints.iter().all(|f| *f == fingerprints[0]));
    let rows: i64 = sqlx::query_scalar("SELECT count(*) FROM deletion.operators WHERE name = $1")
        .bind(&name)
        .fetch_one(owner.pool())
        .await
        .expect("count");
    assert_eq!(rows, 1, "one row, nothing revoked by the race");
}
