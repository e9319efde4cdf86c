//! The hash-chained audit trail (migration 0010) on the real PostgreSQL: concurrent writers of
//! one request never fork its chain, and the database refuses an event that does not extend it.

use crate::store_support;

use activities::store::certificates::CertificateStoreError;
use store_support::*;
use uuid::Uuid;

/// SQLSTATE of the chain trigger's refusal.
const NOT_CHAINED: &str = "BZ005";

#[tokio::test]
async fn concurrent_events_of_one_request_form_one_unbroken_chain() {
    let owner = store().await;
    let worker = worker_store().await;
    let fixture = submitted(&owner, 0).await;
    // With a request row (its row lock serialises writers) and without one (an advisory lock).
    for request_id in [fixture.request_id, Uuid::new_v4()] {
        let mut writers = tokio::task::JoinSet::new();
        for n in 0..24 {
            let worker = worker.clone();
            writers.spawn(async move {
                worker
                    .append_audit(
                        Some(request_id),
                        "chain-test",
                        "probe",
                        serde_json::json!({ "n": n }),
                    )
                    .await
            });
        }
        while let Some(written) = writers.join_next().await {
            written.expect("writer task").expect("append_audit");
        }
        let head = worker
            .verify_audit_chain(request_id)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let events = worker.audit_events(request_id).await.expect("audit");
        assert_eq!(
            head.length as usize,
            events.len(),
            "every event is in the one chain"
        );
        assert!(events.len() >= 24);
    }
}

#[tokio::test]
async fn the_database_refuses_an_event_that_does_not_extend_its_request_chain() {
    let owner = store().await;
    let worker = worker_store().await;
    let fixture = submitted(&owner, 0).await;
    let head = worker
        .verify_audit_chain(fixture.request_id)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(head.length >= 1, "registration is audited");
    let refused = [
        // Not chained at all.
        format!(
            "INSERT INTO deletion.audit_events (request_id, actor, event) \
             VALUES ('{}', 'mallory', 'forged')",
            fixture.request_id
        ),
        // A fork: the head's seq again.
        format!(
            "INSERT INTO deletion.audit_events (request_id, actor, event, seq, prev_hash, row_hash) \
             VALUES ('{}', 'mallory', 'forged', {}, repeat('0', 64), repeat('1', 64))",
            fixture.request_id, head.length
        ),
        // The next seq, linked to something else than the head.
        format!(
            "INSERT INTO deletion.audit_events (request_id, actor, event, seq, prev_hash, row_hash) \
             VALUES ('{}', 'mallory', 'forged', {}, repeat('2', 64), repeat('1', 64))",
            fixture.request_id,
            head.length + 1
        ),
        // A fleet-wide event claiming a place in a chain.
        "INSERT INTO deletion.audit_events (actor, event, seq, prev_hash, row_hash) \
         VALUES ('mallory', 'forged', 1, repeat('0', 64), repeat('1', 64))"
            .to_owned(),
    ];
    for sql in &refused {
        let (code, error) = refused_sqlstate(&worker, sql).await;
        assert_eq!(code.as_deref(), Some(NOT_CHAINED), "{sql}: {error}");
    }
    // A fleet-wide event is not chained and is accepted.
    worker
        .append_audit(None, "chain-test", "fleet_probe", serde_json::json!({}))
        .await
        .expect("a fleet-wide event needs no chain");
    let after = worker
        .verify_audit_chain(fixture.request_id)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(after, head, "nothing was added to the request's chain");
}

#[tokio::test]
async fn a_request_without_a_receipt_has_no_certificate() {
    let owner = store().await;
    let fixture = submitted(&owner, 0).await;
    match owner.certificate(fixture.request_id, None).await {
        Err(CertificateStoreError::NotIssued { request_id }) => {
            assert_eq!(request_id, fixture.request_id)
        }
        other => panic!("an unfinished request has no certificate: {other:?}"),
    }
}
