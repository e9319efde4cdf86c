//! Evidence bound to the request, and abort decided by the database's irreversible marker,
//! through the real CLI and worker.
//!
//! The attacker modelled: someone (or a buggy job) with write access to `deletion.requests` who
//! re-points an approved request at a neighbouring community (its id and host). Every test
//! proves the tampering blocks the next destructive step naming the mismatch, and that nothing of
//! the neighbour (and nothing of the target, unless the deletion is legitimately resumed) is
//! touched.

use std::time::Duration;

use activities::serving::acquire_serving_write;
use activities::store::FenceState;
use serde_json::Value;
use uuid::Uuid;

use testkit::prelude::*;
use testkit::refusal::request_row;

/// Re-points the request row at `community` under `host` (the attack), or back (the repair).
async fn point_request(stack: &Stack, id: &str, community: Uuid, host: &str) {
    sqlx::query("UPDATE deletion.requests SET community_id = $2, host = $3 WHERE id = $1")
        .bind(id.parse::<Uuid>().unwrap_or_default())
        .bind(community)
        .bind(host)
        .execute(stack.store.pool())
        .await
        .unwrap_or_else(|e| panic!("update deletion.requests: {e}"));
}

fn blocked_reason(status: &Value) -> String {
    status["blocked"]["reason"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

fn has_event(events: &[Value], name: &str) -> bool {
    events.iter().any(|e| e["event"] == name)
}

async fn fence_state(stack: &Stack, community: Uuid) -> FenceState {
    stack
        .store
        .fence_status(community)
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .map_or(FenceState::Serving, |f| f.state)
}

/// Asserts the community is served again: a serving write is admitted and a row write succeeds.
async fn assert_served(stack: &Stack, community: Uuid) {
    let guard = acquire_serving_write(&stack.store, community, "after_abort")
        .await
        .unwrap_or_else(|e| panic!("serving writes must be admitted again: {e}"));
    guard.finish().await.unwrap_or_else(|e| panic!("{e}"));
    demo::seed_rows(&stack.store, community, 1)
        .await
        .unwrap_or_else(|e| panic!("row writes must succeed again: {e}"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_repointed_at_a_neighbour_blocks_the_fence_naming_the_mismatch() {
    let (stack, cli, _worker) = with_worker("evidence", &[("BUZZ_FENCE_WAIT_SECS", "1")]).await;
    let host = unique_host("evidence-target");
    let neighbour_host = unique_host("evidence-neighbour");
    let target = seed(&stack, &host, small_plan()).await;
    let neighbour = seed(&stack, &neighbour_host, small_plan()).await;
    let target_before = snapshot(&stack, target.community_id).await;
    let neighbour_before = snapshot(&stack, neighbour.community_id).await;
    let (id, digest) = cli.submit(&host, "alice", &[]).await;

    // A serving write in flight holds the fence back while the row is tampered with.
    let lease = acquire_serving_write(&stack.store, target.community_id, "slow_upload")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    cli.approve(&id, "bob", &digest).await.expect_code(0);
    cli.wait_status(&id, 60, |s| s["phase"] == "fencing").await;
    point_request(&stack, &id, neighbour.community_id, &neighbour_host).await;
    lease.finish().await.unwrap_or_else(|e| panic!("{e}"));

    let status = cli.wait_status(&id, 90, |s| !s["blocked"].is_null()).await;
    let reason = blocked_reason(&status);
    assert_eq!(status["phase"], "fencing", "{status}");
    assert!(
        reason.contains("evidence does not match")
            && reason.contains(&neighbour.community_id.to_string())
            && reason.contains(&target.community_id.to_string())
            && reason.contains("tampered with or a bug"),
        "the block names what differs: {reason}"
    );
    assert_eq!(
        fence_state(&stack, neighbour.community_id).await,
        FenceState::Serving,
        "the neighbour is never quiesced or fenced"
    );
    assert_unchanged(
        &stack,
        neighbour.community_id,
        &neighbour_before,
        "neighbour",
    )
    .await;
    assert_unchanged(&stack, target.community_id, &target_before, "target").await;
    let request = request_row(&stack, id.parse().unwrap_or_default()).await;
    assert!(
        request
            .blocked_reason
            .unwrap_or_default()
            .contains("evidence does not match"),
        "the reason is persisted in Postgres"
    );

    // Remediation: the row is restored from the approved evidence, then unblocked.
    point_request(&stack, &id, target.community_id, &host).await;
    cli.unblock_and_finish(&id, "carol", "restored the request row")
        .await;
    let gone = snapshot(&stack, target.community_id).await;
    gone.assert_gone("the target");
    assert_unchanged(
        &stack,
        neighbour.community_id,
        &neighbour_before,
        "the neighbour is untouched, byte for byte",
    )
    .await;
}

/// A trigger rewrites the request row in the very transaction that binds the destructive
/// manifest, so the tampering lands between freezing the manifest and the first delete: the
/// deletion blocks in `deleting_objects` before the irreversible marker, and the abort is
/// accepted and returns the community to service.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_block_in_object_deletion_before_the_marker_can_be_aborted() {
    let (stack, cli, _worker) = with_worker("abort-before-marker", &[]).await;
    let host = unique_host("marker-target");
    let neighbour_host = unique_host("marker-neighbour");
    let target = seed(&stack, &host, small_plan()).await;
    let neighbour = seed(&stack, &neighbour_host, small_plan()).await;
    let target_before = snapshot(&stack, target.community_id).await;
    let neighbour_before = snapshot(&stack, neighbour.community_id).await;
    let (id, digest) = cli.submit(&host, "alice", &[]).await;

    let function = format!("deletion.tamper_{}", Uuid::new_v4().simple());
    let trigger = format!("tamper_{}", Uuid::new_v4().simple());
    let install = [
        format!(
            "CREATE FUNCTION {function}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN \
             NEW.community_id := '{}'; NEW.host := '{}'; RETURN NEW; END $$",
            neighbour.community_id, neighbour_host
        ),
        format!(
            "CREATE TRIGGER {trigger} BEFORE UPDATE ON deletion.requests FOR EACH ROW \
             WHEN (OLD.id = '{id}' AND OLD.stage = 'fenced' AND NEW.stage = 'drained') \
             EXECUTE FUNCTION {function}()"
        ),
    ];
    for sql in install {
        sqlx::query(sqlx::AssertSqlSafe(sql))
            .execute(stack.store.pool())
            .await
            .unwrap_or_else(|e| panic!("install the tampering trigger: {e}"));
    }

    cli.approve(&id, "bob", &digest).await.expect_code(0);
    let status = cli.wait_status(&id, 90, |s| !s["blocked"].is_null()).await;
    for sql in [
        format!("DROP TRIGGER {trigger} ON deletion.requests"),
        format!("DROP FUNCTION {function}()"),
    ] {
        sqlx::query(sqlx::AssertSqlSafe(sql))
            .execute(stack.store.pool())
            .await
            .unwrap_or_else(|e| panic!("drop the tampering trigger: {e}"));
    }
    assert_eq!(status["phase"], "deleting_objects", "{status}");
    let reason = blocked_reason(&status);
    assert!(
        reason.contains("evidence does not match")
            && reason.contains(&neighbour.community_id.to_string()),
        "{reason}"
    );
    let request = request_row(&stack, id.parse().unwrap_or_default()).await;
    assert_eq!(request.irreversible_at, None, "blocked before the marker");
    assert_eq!(
        fence_state(&stack, target.community_id).await,
        FenceState::Fenced
    );

    let aborted = cli
        .abort(&id, "carol", "request row tampered with")
        .await
        .expect_code(0);
    assert_eq!(aborted.json(), "aborted", "{}", aborted.stdout);
    let status = cli.wait_status(&id, 60, |s| s["phase"] == "aborted").await;
    assert_eq!(status["abort"]["actor"], "carol");
    assert_served(&stack, target.community_id).await;

    let target_after = snapshot(&stack, target.community_id).await;
    assert_eq!(
        target_after.versions, target_before.versions,
        "no version deleted"
    );
    assert_eq!(target_after.keys, target_before.keys);
    for (before, after) in target_before.rows.iter().zip(&target_after.rows) {
        assert!(
            before.rows.iter().all(|row| after.rows.contains(row)),
            "every row of {} kept",
            before.table
        );
    }
    assert_unchanged(
        &stack,
        neighbour.community_id,
        &neighbour_before,
        "neighbour",
    )
    .await;
    assert_eq!(
        fence_state(&stack, neighbour.community_id).await,
        FenceState::Serving
    );
    let events = cli.inspected_audit(&id).await;
    assert!(!has_event(&events, "irreversible"), "{events:?}");
    assert!(has_event(&events, "aborted"), "{events:?}");
}

/// Deletion is paced slowly; once the marker is set the row is tampered with, which blocks at
/// the next delete. The abort is refused (and audited), the block stays, and after the row is
/// restored and unblocked the deletion completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_the_marker_an_abort_is_refused_audited_and_the_deletion_completes_after_unblock() {
    let (stack, cli, _worker) = with_worker(
        "abort-after-marker",
        &[
            ("BUZZ_DELETE_RATE_PER_PREFIX", "2"),
            ("BUZZ_MANIFEST_CHUNK_ENTRIES", "1"),
        ],
    )
    .await;
    let host = unique_host("late-target");
    let neighbour_host = unique_host("late-neighbour");
    let target = seed(&stack, &host, small_plan()).await;
    let neighbour = seed(&stack, &neighbour_host, small_plan()).await;
    let neighbour_before = snapshot(&stack, neighbour.community_id).await;
    let (id, digest) = cli
        .submit(&host, "alice", &["--delete-parallelism", "1"])
        .await;
    let request_id: Uuid = id.parse().unwrap_or_default();

    cli.approve(&id, "bob", &digest).await.expect_code(0);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(90);
    loop {
        let request = request_row(&stack, request_id).await;
        if request.irreversible_at.is_some() {
            assert_eq!(
                request.stage, "drained",
                "the deletion must still be running"
            );
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the marker was never set"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    point_request(&stack, &id, neighbour.community_id, &neighbour_host).await;
    let status = cli.wait_status(&id, 60, |s| !s["blocked"].is_null()).await;
    assert_eq!(status["phase"], "deleting_objects", "{status}");
    assert!(
        blocked_reason(&status).contains("evidence does not match"),
        "{status}"
    );

    let refused = cli
        .abort(&id, "carol", "changed my mind")
        .await
        .expect_code(1);
    assert!(
        refused.stderr.contains("abort refused") && refused.stderr.contains("irreversible point"),
        "{}",
        refused.stderr
    );
    let events = cli.inspected_audit(&id).await;
    let refusal = events
        .iter()
        .find(|e| e["event"] == "abort_refused")
        .unwrap_or_else(|| panic!("the refusal is in the audit trail: {events:?}"));
    assert_eq!(refusal["actor"], "carol");
    let still = cli
        .run(&["community", "status", &id])
        .await
        .expect_code(1)
        .json();
    assert!(
        !still["blocked"].is_null(),
        "blocked stays blocked: {still}"
    );
    assert!(still["abort"].is_null(), "{still}");

    point_request(&stack, &id, target.community_id, &host).await;
    cli.unblock_and_finish(&id, "dave", "restored the request row")
        .await;
    let gone = snapshot(&stack, target.community_id).await;
    gone.assert_gone("the target");
    assert_unchanged(
        &stack,
        neighbour.community_id,
        &neighbour_before,
        "the neighbour is untouched, byte for byte",
    )
    .await;
}
