//! A freeze stopped mid-way continues after what it stored instead of listing from the start.
//!
//! A key of unknown shape appears under the target's media prefix after the inventory (a writer we
//! do not know, between the submission and the approval). The freeze lists the media prefix, stores
//! the chunks before that key (it sorts after every content hash), and blocks naming it. The
//! operator removes it and unblocks: the retried freeze keeps every stored chunk as it was (same
//! rows, written by the first attempt), audits `freeze_resumed` with what it kept, lists only the
//! rest, and the manifest binds with every version exactly once. The deletion completes.

use std::collections::BTreeSet;

use serde_json::Value;
use uuid::Uuid;

use testkit::prelude::*;
use testkit::records::stage_of;

/// Frozen chunk rows of the request: `(chunk_no, exec_generation, entries)`, lowest first.
async fn frozen_chunks(stack: &Stack, request: Uuid) -> Vec<(i32, i64, Vec<String>)> {
    let rows: Vec<(i32, i64, sqlx::types::Json<Vec<String>>)> = sqlx::query_as(
        "SELECT chunk_no, exec_generation, entries FROM deletion.manifest_chunks \
         WHERE request_id = $1 AND late_at IS NULL ORDER BY chunk_no",
    )
    .bind(request)
    .fetch_all(stack.store.pool())
    .await
    .unwrap_or_else(|e| panic!("chunks of {request}: {e}"));
    rows.into_iter()
        .map(|(chunk_no, generation, entries)| (chunk_no, generation, entries.0))
        .collect()
}

/// The one audit event named `event`.
fn one_event(audit: &[Value], event: &str) -> Value {
    let found: Vec<&Value> = audit.iter().filter(|e| e["event"] == event).collect();
    assert_eq!(found.len(), 1, "one {event} expected: {audit:#?}");
    found[0].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_freeze_blocked_mid_listing_resumes_after_the_chunks_it_stored() {
    let env = [("BUZZ_MANIFEST_CHUNK_ENTRIES", "3")];
    let (stack, cli, _worker) = with_worker("freeze-resume", &env).await;
    let target = Tenant::seed(&stack, "freeze-resume", small_plan()).await;
    let neighbour = Tenant::seed(&stack, "freeze-kept", small_plan()).await;
    let neighbour_before = Kept::now(&stack, neighbour.id).await;
    let versions_before = object_versions(&stack, target.id).await.len();

    let (id, digest) = cli.submit(&target.host, "alice", &[]).await;
    let request: Uuid = id.parse().unwrap_or_default();
    // After the inventory, before the approval: a key no writer of ours makes.
    let (stray, _) = plant_stray_key(&stack, target.id).await;
    cli.approve(&id, "bob", &digest).await.expect_code(0);

    let status = cli
        .wait_status(&id, 180, |s| {
            s["blocked"]["reason"]
                .as_str()
                .is_some_and(|r| r.contains(&stray))
        })
        .await;
    assert_eq!(stage_of(&stack, request).await, "fenced", "{status}");
    let stored = frozen_chunks(&stack, request).await;
    assert!(
        !stored.is_empty(),
        "the freeze stored no chunk before the stray key (it sorts after every content hash)"
    );
    let stored_versions: usize = stored.iter().map(|(_, _, entries)| entries.len()).sum();

    remove_stray_key(&stack, target.id, &stray).await;
    cli.unblock_and_finish(&id, "carol", "removed the stray key")
        .await;
    target.assert_gone(&stack, "the target").await;
    neighbour_before
        .assert_unchanged(&stack, "the neighbour")
        .await;

    // The chunks the first attempt stored are still its own rows, unchanged.
    let frozen = frozen_chunks(&stack, request).await;
    for kept in &stored {
        assert!(
            frozen.contains(kept),
            "chunk {} was rewritten by the retry: {frozen:?}",
            kept.0
        );
    }
    // The retry said what it kept, and stored only the rest: every version exactly once.
    let audit = cli.inspected_audit(&id).await;
    let resumed = one_event(&audit, "freeze_resumed");
    assert_eq!(resumed["detail"]["chunks_kept"], stored.len(), "{resumed}");
    assert_eq!(
        resumed["detail"]["versions_kept"], stored_versions,
        "{resumed}"
    );
    assert_eq!(resumed["detail"]["chunks_cleared"], 0, "{resumed}");
    let retry_generation = resumed["detail"]["exec_generation"]
        .as_i64()
        .unwrap_or_default();
    assert!(
        stored
            .iter()
            .all(|(_, generation, _)| *generation < retry_generation),
        "the kept chunks were written before the retry: {stored:?} / {resumed}"
    );
    let entries: Vec<&String> = frozen.iter().flat_map(|(_, _, e)| e).collect();
    let distinct: BTreeSet<&String> = entries.iter().copied().collect();
    assert_eq!(entries.len(), distinct.len(), "a version is in two chunks");
    assert_eq!(
        entries.len(),
        versions_before,
        "the manifest holds every version the target had"
    );
    let drained = one_event(&audit, "drained");
    assert_eq!(drained["detail"]["versions"], versions_before, "{drained}");
}
