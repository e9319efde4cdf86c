//! Evidence binding, late zombies and the irreversible marker, against the real PostgreSQL
//! (`bash deploy/local/up && source .state/env`).
//!
//! The attackers modelled: (a) someone (or a buggy job) with write access to
//! `deletion.requests` who re-points an approved request at another community after approval —
//! only the id and host, or the whole frozen inventory with a digest recomputed to match; (b) a
//! database owner who disables the approvals table's append-only trigger inside their own
//! transaction and rewrites the approved digest. Neither may get anything deleted: the next
//! destructive step is refused naming the mismatch, and nothing of either community changes.

use crate::store_support;
use activities::store::{ApprovalError, RequestError};

use activities::community::{PhaseError, into_activity_error};
use activities::failure::{Classified, Severity};
use activities::store::{Community, FenceState, Stage, Store, StoreError};
use store_support::*;
use temporalio_sdk::activities::ActivityError;
use uuid::Uuid;
use workflows::community::contracts::AbortRequest;
use workflows::contract::STALE_GENERATION_FAILURE_TYPE;

/// A neighbouring community with rows, and a snapshot of them.
async fn neighbour(store: &Store) -> (Community, Vec<activities::store::TableSnapshot>) {
    let neighbour = seeded_community(store, 4).await;
    let rows = store.snapshot_rows(neighbour.id).await.expect("snapshot");
    (neighbour, rows)
}

/// The rows of `community` as they are now.
async fn rows_now(store: &Store, community: Uuid) -> Vec<activities::store::TableSnapshot> {
    store.snapshot_rows(community).await.expect("rows")
}

/// Every row of `community` is byte-identical to `before`.
async fn assert_rows_unchanged(
    store: &Store,
    community: Uuid,
    before: &[activities::store::TableSnapshot],
) {
    assert_eq!(rows_now(store, community).await, before);
}

/// The neighbour is still serving (never fenced) and every row of it is byte-identical to
/// `before`.
async fn assert_neighbour_untouched(
    store: &Store,
    neighbour: Uuid,
    before: &[activities::store::TableSnapshot],
) {
    let fence = store.fence_status(neighbour).await.expect("fence");
    assert_eq!(fence_state(fence), FenceState::Serving);
    assert_rows_unchanged(store, neighbour, before).await;
}

/// Attacker (a): points the request row at `to` (community id and host).
async fn repoint_request(store: &Store, request_id: Uuid, to: &Community) {
    sqlx::query("UPDATE deletion.requests SET community_id = $2, host = $3 WHERE id = $1")
        .bind(request_id)
        .bind(to.id)
        .bind(&to.host)
        .execute(store.pool())
        .await
        .expect("tamper with the request row");
}

fn fence_state(status: Option<activities::store::FenceStatus>) -> FenceState {
    status.map_or(FenceState::Serving, |f| f.state)
}

/// Asserts `result` is an evidence mismatch whose message contains every one of `names`.
fn assert_mismatch<T: std::fmt::Debug>(result: Result<T, StoreError>, names: &[&str]) {
    match result {
        Err(error @ StoreError::Approval(ApprovalError::EvidenceMismatch { .. })) => {
            assert_eq!(error.severity(), Severity::Permanent);
            let message = error.to_string();
            for name in names {
                assert!(message.contains(name), "{name} missing from: {message}");
            }
            assert!(message.contains("tampered with or a bug"), "{message}");
        }
        other => panic!("expected EvidenceMismatch, got {other:?}"),
    }
}

#[tokio::test]
async fn a_request_repointed_at_a_neighbour_after_approval_cannot_fence_either_community() {
    let store = store().await;
    let fixture = approved(&store, 3).await;
    let (neighbour, neighbour_rows) = neighbour(&store).await;
    let target_rows = rows_now(&store, fixture.community.id).await;
    let generation = fixture.request().await.exec_generation;

    repoint_request(&store, fixture.request_id, &neighbour).await;

    let target = fixture.community.id.to_string();
    let other = neighbour.id.to_string();
    assert_mismatch(
        store.claim(fixture.request_id, &[Stage::Approved]).await,
        &[&target, &other, &neighbour.host],
    );
    assert_eq!(
        fixture.request().await.exec_generation,
        generation,
        "a refused claim changes nothing"
    );
    // The attempt that claimed before the edit is refused at its next write too.
    assert_mismatch(store.begin_quiescing(&fixture.token).await, &[&other]);
    assert_mismatch(store.fence(&fixture.token).await, &[&other]);

    for community in [fixture.community.id, neighbour.id] {
        let fence = store.fence_status(community).await.expect("fence");
        assert_eq!(fence_state(fence), FenceState::Serving, "{community}");
    }
    assert_rows_unchanged(&store, neighbour.id, &neighbour_rows).await;
    assert_rows_unchanged(&store, fixture.community.id, &target_rows).await;
}

#[tokio::test]
async fn a_whole_inventory_swapped_for_a_neighbours_is_refused_by_the_approval_digest() {
    let store = store().await;
    let fixture = approved(&store, 2).await;
    let (neighbour, neighbour_rows) = neighbour(&store).await;
    let approved_digest = fixture
        .request()
        .await
        .inventory_digest
        .expect("frozen digest");

    // Attacker (a), thorough: the neighbour's own inventory, with a digest that matches it.
    let forged = inventory_of(&store, &neighbour).await;
    let forged_digest = forged.digest();
    sqlx::query(
        "UPDATE deletion.requests SET community_id = $2, host = $3, inventory = $4, \
         inventory_digest = $5 WHERE id = $1",
    )
    .bind(fixture.request_id)
    .bind(neighbour.id)
    .bind(&neighbour.host)
    .bind(sqlx::types::Json(
        serde_json::to_value(&forged).expect("json"),
    ))
    .bind(&forged_digest)
    .execute(store.pool())
    .await
    .expect("tamper");

    assert_mismatch(
        store.claim(fixture.request_id, &[Stage::Approved]).await,
        &[&approved_digest, &forged_digest],
    );
    assert_neighbour_untouched(&store, neighbour.id, &neighbour_rows).await;
}

#[tokio::test]
async fn an_approval_digest_rewritten_by_the_owner_blocks_the_next_destructive_step() {
    let store = store().await;
    let fixture = fenced(&store, 2).await;
    let frozen = fixture
        .request()
        .await
        .inventory_digest
        .expect("frozen digest");
    let rewritten = "0".repeat(64);

    // Attacker (b): the owner lifts the append-only trigger for one transaction only.
    let mut tx = store.pool().begin().await.expect("begin");
    sqlx::query("ALTER TABLE deletion.approvals DISABLE TRIGGER approvals_append_only")
        .execute(&mut *tx)
        .await
        .expect("disable the append-only trigger");
    sqlx::query("UPDATE deletion.approvals SET inventory_digest = $2 WHERE request_id = $1")
        .bind(fixture.request_id)
        .bind(&rewritten)
        .execute(&mut *tx)
        .await
        .expect("rewrite the approval");
    sqlx::query("ALTER TABLE deletion.approvals ENABLE TRIGGER approvals_append_only")
        .execute(&mut *tx)
        .await
        .expect("re-enable the append-only trigger");
    tx.commit().await.expect("commit");

    let [media, _, _] = activities::taxonomy::tenant_prefixes(fixture.community.id);
    let entries = media_entries(fixture.community.id, 2);
    assert_mismatch(
        store
            .append_manifest_chunk(&fixture.token, 0, &media, &entries, &ChunkTail::default())
            .await,
        &[&frozen, &rewritten],
    );
    assert_mismatch(store.verify_fence(&fixture.token).await, &[&rewritten]);
    assert_mismatch(
        store.claim(fixture.request_id, &[Stage::Fenced]).await,
        &[&rewritten],
    );
    let progress = fixture.chunk_progress().await;
    assert_eq!(progress.chunks_total, 0, "no manifest chunk was written");
}

#[tokio::test]
async fn a_repointed_request_cannot_cross_the_irreversible_point_or_purge_and_can_be_aborted() {
    let store = store().await;
    let fixture = drained(&store, 3, 4, 2).await;
    let (neighbour, neighbour_rows) = neighbour(&store).await;
    let target_rows = rows_now(&store, fixture.community.id).await;

    repoint_request(&store, fixture.request_id, &neighbour).await;

    let other = neighbour.id.to_string();
    assert_mismatch(store.mark_irreversible(&fixture.token).await, &[&other]);
    assert_mismatch(store.verify_fence(&fixture.token).await, &[&other]);
    assert_mismatch(
        store
            .claim(
                fixture.request_id,
                &[Stage::Drained, Stage::BindingsRemoved],
            )
            .await,
        &[&other],
    );
    assert_eq!(fixture.request().await.irreversible_at, None);
    assert_rows_unchanged(&store, fixture.community.id, &target_rows).await;

    // Before the marker the abort still works, and lifts the fence this request holds (the
    // target's), whatever community the row names now.
    let abort = AbortRequest {
        actor: APPROVER.into(),
        reason: "the request row was tampered with".into(),
        signed: None,
    };
    store
        .unfence_for_abort(fixture.request_id, &abort)
        .await
        .expect("abort");
    assert_eq!(
        fence_state(fixture.fence_status().await),
        FenceState::Serving
    );
    demo::seed_rows(&store, fixture.community.id, 1)
        .await
        .expect("the target is served again");
    assert_neighbour_untouched(&store, neighbour.id, &neighbour_rows).await;
}

#[tokio::test]
async fn a_repointed_request_purges_no_row_of_either_community() {
    let store = store().await;
    let fixture = drained(&store, 5, 0, 10).await;
    store
        .mark_bindings_removed(&fixture.token, serde_json::json!({ "deleted": 0 }))
        .await
        .expect("empty manifest");
    let token = store
        .claim(fixture.request_id, &[Stage::BindingsRemoved])
        .await
        .expect("claim");
    let (neighbour, neighbour_rows) = neighbour(&store).await;
    let target_rows = rows_now(&store, fixture.community.id).await;

    repoint_request(&store, fixture.request_id, &neighbour).await;

    assert_mismatch(
        store.purge_postgres(&token, 2, |_, _| {}).await,
        &[&neighbour.id.to_string()],
    );
    assert_rows_unchanged(&store, neighbour.id, &neighbour_rows).await;
    assert_rows_unchanged(&store, fixture.community.id, &target_rows).await;
}

/// The live attempt claimed; a zombie (an older attempt that stalled before its claim) claims
/// after it. The live attempt's next write is refused as stale, but that is retryable and leaves
/// the request unblocked: the retry re-claims and fences, and the zombie is the one refused.
#[tokio::test]
async fn a_late_claiming_zombie_cannot_block_the_live_attempt() {
    let store = store().await;
    let fixture = approved(&store, 1).await;
    let live = fixture.token.clone();
    let zombie = store
        .claim(fixture.request_id, &[Stage::Approved])
        .await
        .expect("the zombie's late claim");

    let refused = store.begin_quiescing(&live).await;
    let stale = match refused {
        Err(error @ StoreError::Request(RequestError::StaleGeneration { .. })) => error,
        other => panic!("expected StaleGeneration, got {other:?}"),
    };
    assert_eq!(stale.severity(), Severity::Transient);
    match into_activity_error(PhaseError::Store(stale)) {
        ActivityError::Application(failure) => {
            assert_eq!(failure.type_name(), Some(STALE_GENERATION_FAILURE_TYPE));
            assert!(!failure.is_non_retryable(), "Temporal retries it");
        }
        other => panic!("expected an application failure, got {other:?}"),
    }
    assert_eq!(fixture.request().await.blocked_reason, None);

    // Temporal's retry of the live attempt.
    let retried = store
        .claim(fixture.request_id, &[Stage::Approved])
        .await
        .expect("the retry re-claims");
    store.begin_quiescing(&retried).await.expect("quiesce");
    store.fence(&retried).await.expect("fence");
    assert_eq!(fixture.stage().await, Stage::Fenced);
    assert_matches!(
        store.fence(&zombie).await,
        Err(StoreError::Request(RequestError::StaleGeneration { .. }))
    );
}

#[tokio::test]
async fn the_marker_not_the_stage_decides_an_abort_and_a_refusal_is_audited() {
    let store = store().await;
    // Drained (the workflow is deleting objects) but no marker yet: abort lifts the fence.
    let early = drained(&store, 1, 3, 10).await;
    let abort = AbortRequest {
        actor: APPROVER.into(),
        reason: "blocked before deleting anything".into(),
        signed: None,
    };
    store
        .unfence_for_abort(early.request_id, &abort)
        .await
        .expect("abort before the marker");
    assert_eq!(early.stage().await, Stage::Aborted);
    demo::seed_rows(&store, early.community.id, 1)
        .await
        .expect("served again");

    // Same stage, marker set: refused, and the refusal is in the audit trail.
    let late = drained(&store, 1, 3, 10).await;
    late.mark_irreversible().await;
    late.assert_abort_refused_past_the_marker(&abort).await;
    let audit = store.inspect(late.request_id).await.expect("inspect").audit;
    let refusal = audit
        .iter()
        .find(|e| e.event == "abort_refused")
        .unwrap_or_else(|| panic!("no abort_refused event: {audit:?}"));
    assert_eq!(refusal.actor, APPROVER);
    assert!(
        refusal.detail["reason"]
            .as_str()
            .unwrap_or_default()
            .contains("irreversible point"),
        "{refusal:?}"
    );
    store
        .verify_fence(&late.token)
        .await
        .expect("the deletion goes on");
}
