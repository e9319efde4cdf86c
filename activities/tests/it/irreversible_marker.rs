//! The irreversible marker is set only once S3 acknowledged a destructive call (issue 30): a
//! call is recorded as pending before it is sent, an abort waits while it is pending, a whole
//! refusal withdraws it (the request stays abortable), an acknowledgement sets the marker, and a
//! call left pending by a dead attempt is resolved conservatively by the next one.

use crate::store_support;
use activities::store::RequestError;

use activities::failure::{Classified, Severity};
use activities::store::{FenceState, Stage, StoreError};
use store_support::*;
use workflows::community::contracts::AbortRequest;

fn abort() -> AbortRequest {
    AbortRequest {
        actor: APPROVER.into(),
        reason: "the worker lacks s3:DeleteObjectVersion".into(),
        signed: None,
    }
}

/// `(irreversible_at set, irreversible_pending_at set)` as Postgres holds them.
async fn marker_columns(fixture: &Fixture) -> (bool, bool) {
    sqlx::query_as(
        "SELECT irreversible_at IS NOT NULL, irreversible_pending_at IS NOT NULL \
         FROM deletion.requests WHERE id = $1",
    )
    .bind(fixture.request_id)
    .fetch_one(fixture.store.pool())
    .await
    .expect("marker columns")
}

#[tokio::test]
async fn a_pending_call_holds_the_abort_and_a_whole_refusal_leaves_the_request_abortable() {
    let store = store().await;
    let fixture = drained(&store, 0, 3, 10).await;

    assert!(!fixture.begin_destructive_call().await);
    assert_eq!(marker_columns(&fixture).await, (false, true));
    // Idempotent while pending.
    assert!(!fixture.begin_destructive_call().await);

    // The call may be deleting: the abort is neither accepted nor refused, and retried.
    let held = store.unfence_for_abort(fixture.request_id, &abort()).await;
    assert_matches!(
        held,
        Err(StoreError::Request(
            RequestError::DestructiveCallPending { .. }
        ))
    );
    assert_eq!(
        held.map(|_| ()).unwrap_err().severity(),
        Severity::Transient
    );
    assert_eq!(fixture.stage().await, Stage::Drained);
    assert_eq!(fixture.events_named("abort_refused").await.len(), 0);

    // S3 refused the call whole: nothing was deleted, the pending call is withdrawn.
    let refusal = serde_json::json!({"calls_sent": 1, "calls_refused_whole": 1});
    assert!(fixture.withdraw_destructive_call(refusal).await);
    assert_eq!(marker_columns(&fixture).await, (false, false));
    assert_eq!(
        fixture
            .events_named("destructive_calls_refused")
            .await
            .len(),
        1
    );
    assert_eq!(fixture.events_named("irreversible").await.len(), 0);
    assert!(fixture.request().await.irreversible_at.is_none());

    // So the abort goes through and the community is served again.
    store
        .unfence_for_abort(fixture.request_id, &abort())
        .await
        .expect("abort before the marker");
    assert_eq!(fixture.stage().await, Stage::Aborted);
    let fence = fixture.fence_status().await.expect("row");
    assert_eq!(fence.state, FenceState::Serving);
}

#[tokio::test]
async fn an_acknowledged_call_sets_the_marker_and_the_abort_is_refused() {
    let store = store().await;
    let fixture = drained(&store, 0, 3, 10).await;
    fixture.begin_destructive_call().await;

    store
        .mark_irreversible_because(
            &fixture.token,
            serde_json::json!({"s3": "acknowledged a deletion"}),
        )
        .await
        .expect("mark");
    assert_eq!(marker_columns(&fixture).await, (true, false));
    assert_eq!(fixture.events_named("irreversible").await.len(), 1);
    // Past the marker nothing is pending any more, and nothing can be withdrawn.
    assert!(fixture.begin_destructive_call().await);
    assert!(
        !fixture
            .withdraw_destructive_call(serde_json::json!({}))
            .await
    );
    assert_eq!(marker_columns(&fixture).await, (true, false));
    fixture.assert_abort_refused_past_the_marker(&abort()).await;
}

#[tokio::test]
async fn a_call_left_pending_by_a_dead_attempt_sets_the_marker_at_the_next_attempt() {
    let store = store().await;
    let mut fixture = drained(&store, 0, 3, 10).await;
    let dead = fixture.token.clone();
    store.begin_destructive_call(&dead).await.expect("begin");

    // The next attempt cannot know what the dead attempt's call did.
    let next = fixture.claim(&[Stage::Drained]).await;
    assert!(store.resolve_inherited_call(&next).await.expect("resolve"));
    assert_eq!(marker_columns(&fixture).await, (true, false));
    // The dead attempt can withdraw nothing, and the abort is refused.
    let stale = store
        .withdraw_destructive_call(&dead, serde_json::json!({}))
        .await;
    assert_matches!(
        stale,
        Err(StoreError::Request(RequestError::StaleGeneration { .. }))
    );
    fixture.assert_abort_refused_past_the_marker(&abort()).await;

    // Without a pending call an attempt's start changes nothing.
    let fresh = drained(&store, 0, 3, 10).await;
    assert!(
        !store
            .resolve_inherited_call(&fresh.token)
            .await
            .expect("resolve nothing")
    );
    assert_eq!(marker_columns(&fresh).await, (false, false));
}

#[tokio::test]
async fn the_database_refuses_a_pending_call_and_the_marker_at_once() {
    let store = store().await;
    let fixture = drained(&store, 0, 3, 10).await;
    let both = sqlx::query(
        "UPDATE deletion.requests SET irreversible_at = now(), irreversible_pending_at = now() \
         WHERE id = $1",
    )
    .bind(fixture.request_id)
    .execute(store.pool())
    .await;
    assert!(both.is_err(), "{both:?}");
    assert_eq!(marker_columns(&fixture).await, (false, false));
}
