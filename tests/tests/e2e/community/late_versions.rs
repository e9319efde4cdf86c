//! Writers that outlive their serving-write lease.
//!
//! 1. A serving writer takes a lease and stalls (no heartbeat, never released); its PutObject
//!    lands after the lease expired and after the fence. The drain waits for the lease's expiry
//!    plus the protected-operation bound before the manifest is frozen, so the late-landing
//!    version is in the frozen manifest and deleted with it.
//! 2. A version planted under the target's prefix after the manifest was frozen (a writer that
//!    skipped the lease library): verification blocks naming key, version id and kind; after
//!    `community unblock` the version is appended as a late manifest chunk, deleted and stamped,
//!    and the request completes. Neighbours are untouched.

use std::time::Duration;

use activities::serving::MAX_PROTECTED_OPERATION;
use activities::taxonomy::PrefixRoot;
use demo::writer_key;
use uuid::Uuid;

use testkit::poll;
use testkit::prelude::*;
use testkit::records::stage_of;
use testkit::refusal::request_row;
use testkit::seed::{ONE_VERSION_PER_CHUNK_SLOWLY, abandoned_s3_put_lease};

/// A content hash no other write uses.
fn fresh_hash() -> String {
    format!("{:064x}", Uuid::new_v4().as_u128())
}

/// Every version id S3 lists for `key`.
async fn versions_of(stack: &Stack, community: Uuid, key: &str) -> Vec<String> {
    object_versions(stack, community)
        .await
        .into_iter()
        .filter(|v| v.key == key)
        .map(|v| v.version_id)
        .collect()
}

/// `(chunk_no, late, stamped)` of every manifest chunk of the request listing `key@version`.
async fn chunks_listing(
    stack: &Stack,
    request: Uuid,
    key: &str,
    version: &str,
) -> Vec<(i32, bool, bool)> {
    let rows: Vec<(i32, bool, bool, sqlx::types::Json<Vec<String>>)> = sqlx::query_as(
        "SELECT chunk_no, late_at IS NOT NULL, deleted_at IS NOT NULL, entries \
         FROM deletion.manifest_chunks WHERE request_id = $1 ORDER BY chunk_no",
    )
    .bind(request)
    .fetch_all(stack.store.pool())
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    rows.into_iter()
        .filter(|(_, _, _, entries)| {
            entries
                .0
                .iter()
                .any(|e| e.contains(key) && e.contains(version))
        })
        .map(|(chunk_no, late, stamped, _)| (chunk_no, late, stamped))
        .collect()
}

/// Polls the request row until its stage is `stage` (fast: the row, not the CLI).
async fn wait_for_stage(stack: &Stack, request: Uuid, stage: &str, secs: u64) {
    let every = Duration::from_millis(50);
    poll::until(Duration::from_secs(secs), every, async || {
        let current = stage_of(stack, request).await;
        match current == stage {
            true => Ok(()),
            false => Err(format!(
                "request {request} never reached {stage} (at {current})"
            )),
        }
    })
    .await;
}

/// A version a writer that skipped the lease library puts under the community's media prefix,
/// with `body`: its key and version id.
async fn land_version(stack: &Stack, community: Uuid, body: &[u8]) -> (String, String) {
    let key = writer_key(PrefixRoot::Media, community, &fresh_hash());
    let version = stack.objects.put_object(&key, body.to_vec()).await;
    let version = version.unwrap_or_else(|e| panic!("putting {key}: {e}"));
    (key, version)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_put_landing_after_its_lease_expired_and_after_the_fence_is_frozen_and_deleted() {
    let (stack, cli, _worker) = with_worker("stalled", &[]).await;
    let target = Tenant::seed(&stack, "stalled", small_plan()).await;
    let community = target.id;

    let (id, digest) = cli.submit(&target.host, "alice", &[]).await;
    let request: Uuid = id.parse().unwrap_or_default();
    // The serving process admits a write (lease of 2 s), then stalls before its PutObject: no
    // heartbeat renews the lease and nothing releases it. It is taken after the submission (the
    // inventory is the slow part on a loaded machine), so the bound's window below starts with
    // the approval.
    let stalled = "serving:stalled-test";
    let lease = abandoned_s3_put_lease(&stack, community, stalled, Duration::from_secs(2)).await;
    cli.approve(&id, "bob", &digest).await.expect_code(0);
    // The fence closes once the lease expired (it is no longer live)...
    wait_for_stage(&stack, request, "fenced", 60).await;
    let expired: bool = sqlx::query_scalar(
        "SELECT expires_at <= clock_timestamp() AND released_at IS NULL \
         FROM deletion.serving_write_leases WHERE id = $1",
    )
    .bind(lease.id)
    .fetch_one(stack.store.pool())
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    assert!(expired, "the lease expired unreleased before the fence");

    // ...and the stalled process resumes: its PutObject lands after expiry and after the fence,
    // well inside the protected-operation bound (5 s on, or earlier if a slow machine took most
    // of the bound getting here; never in its last 10 s).
    let bound = chrono::Duration::from_std(MAX_PROTECTED_OPERATION).unwrap_or_default();
    let left = (lease.expires_at + bound - chrono::Utc::now() - chrono::Duration::seconds(10))
        .to_std()
        .unwrap_or_default();
    tokio::time::sleep(left.min(Duration::from_secs(5))).await;
    assert_eq!(
        stage_of(&stack, request).await,
        "fenced",
        "the manifest must not be frozen while the stalled lease is inside its bound"
    );
    let (key, version) = land_version(&stack, community, b"landed late").await;
    assert_eq!(
        versions_of(&stack, community, &key).await,
        vec![version.clone()]
    );

    cli.watch_to_end(&id).await;
    assert_eq!(stage_of(&stack, request).await, "retention_pending");
    assert!(
        versions_of(&stack, community, &key).await.is_empty(),
        "the late-landing version survived the deletion"
    );
    assert!(snapshot(&stack, community).await.versions.is_empty());
    // It was in the frozen manifest (not a late chunk), and that chunk is stamped.
    let chunks = chunks_listing(&stack, request, &key, &version).await;
    assert_eq!(chunks.len(), 1, "{chunks:?}");
    assert!(
        !chunks[0].1 && chunks[0].2,
        "frozen and stamped: {chunks:?}"
    );

    // The drain waited until expiry plus the bound, and says so.
    let inspection = cli.inspect(&id).await;
    let drained = inspection["checkpoints"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .find(|c| c["stage"] == "serving_writes_drained")
        .unwrap_or_else(|| panic!("no serving_writes_drained checkpoint: {inspection}"));
    assert_eq!(
        drained["detail"]["stalled_leases_waited_for"], 1,
        "{drained}"
    );
    // The lease's expiry is the one it was acquired with (nothing renewed it); its row may
    // already be reaped, being past its window.
    let drained_at: chrono::DateTime<chrono::Utc> = sqlx::query_scalar(
        "SELECT reached_at FROM deletion.checkpoints \
         WHERE request_id = $1 AND stage = 'serving_writes_drained'",
    )
    .bind(request)
    .fetch_one(stack.store.pool())
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    assert!(
        drained_at >= lease.expires_at + bound,
        "drained before the lease's expiry {} plus the protected-operation bound",
        lease.expires_at
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_planted_after_the_freeze_blocks_verification_and_unblock_deletes_it_as_a_late_chunk()
 {
    // One version per chunk and two deletes per second per prefix: object deletion takes
    // seconds, so the plant lands after the freeze and before verification.
    let (stack, cli, _worker) = with_worker("late", &ONE_VERSION_PER_CHUNK_SLOWLY).await;
    let target = Tenant::seed(&stack, "late", small_plan()).await;
    let community = target.id;
    let neighbour = Tenant::seed(&stack, "late-neighbour", small_plan()).await;
    let neighbour_before = neighbour.kept(&stack).await;

    let (id, digest) = cli.submit(&target.host, "alice", &[]).await;
    let request: Uuid = id.parse().unwrap_or_default();
    cli.approve(&id, "bob", &digest).await.expect_code(0);
    wait_for_stage(&stack, request, "drained", 120).await;
    // A writer that skipped the lease library lands a version after the freeze.
    let (key, version) = land_version(&stack, community, b"after the freeze").await;
    assert!(
        chunks_listing(&stack, request, &key, &version)
            .await
            .is_empty(),
        "the plant must not be in the frozen manifest"
    );

    let status = cli.wait_status(&id, 180, |s| !s["blocked"].is_null()).await;
    assert_eq!(status["phase"], "verifying", "{status}");
    let reason = status["blocked"]["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains(&key) && reason.contains(&version) && reason.contains("(object)"),
        "the block must name key, version and kind: {reason}"
    );
    let persisted = request_row(&stack, request)
        .await
        .blocked_reason
        .unwrap_or_default();
    assert!(
        persisted.contains(&key) && persisted.contains(&version),
        "{persisted}"
    );
    // Blocked, not retried: the version is still there and the request is not complete.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        versions_of(&stack, community, &key).await,
        vec![version.clone()]
    );
    assert_eq!(stage_of(&stack, request).await, "cache_purged");

    cli.unblock_and_finish(&id, "carol", "stopped the rogue writer")
        .await;

    assert_eq!(stage_of(&stack, request).await, "retention_pending");
    assert!(
        versions_of(&stack, community, &key).await.is_empty(),
        "the late version survived"
    );
    target.assert_gone(&stack, "the target").await;
    neighbour_before
        .assert_unchanged(&stack, "the neighbour changed")
        .await;
    // The late version went through the manifest: one late chunk, stamped.
    let chunks = chunks_listing(&stack, request, &key, &version).await;
    assert_eq!(chunks.len(), 1, "{chunks:?}");
    let (late_chunk, late, stamped) = chunks[0];
    assert!(late && stamped, "{chunks:?}");
    let inspection = cli.inspect(&id).await;
    let events = audit_of(&inspection);
    let appended = events
        .iter()
        .find(|e| e["event"] == "late_chunk_appended" && e["detail"]["chunk_no"] == late_chunk)
        .unwrap_or_else(|| panic!("no late_chunk_appended audit event: {events:?}"));
    assert_eq!(appended["detail"]["versions"], 1, "{appended}");
    assert!(
        events.iter().any(|e| e["event"] == "chunk_stamped"
            && e["detail"]["chunk_no"] == late_chunk
            && e["detail"]["late"] == true),
        "the late chunk's stamp is audited: {events:?}"
    );
    let order: Vec<&str> = events.iter().filter_map(|e| e["event"].as_str()).collect();
    let position = |name: &str| order.iter().position(|e| *e == name);
    assert!(
        position("blocked") < position("unblocked")
            && position("unblocked") < position("late_chunk_appended"),
        "blocked, then unblocked, then the late chunk: {order:?}"
    );
}
